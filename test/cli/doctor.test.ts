import { readdirSync } from "node:fs"
import { createServer, type Server } from "node:net"
import { createSocket, type Socket } from "node:dgram"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { makeCertificate, unusedPort, makeStores, stderrLines } from "../support/cli.ts"
import { ROOT, runCli } from "../support/process.ts"

const stores = makeStores()
afterAll(() => stores.cleanup())

const MIGRATIONS = readdirSync(join(ROOT, "migrations")).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort()
const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

/** Every listener on a port free a moment ago, outside the ephemeral range, on 127.0.0.1: what doctor binds to check. */
const unusedPorts = async () => ({
  HOST: "127.0.0.1",
  PORT: String(await unusedPort()),
  MQTT_PORT: String(await unusedPort()),
  MQTT_WS_PORT: String(await unusedPort()),
  COAP_PORT: String(await unusedPort()),
  HTTPS_PORT: String(await unusedPort()),
  MQTTS_PORT: String(await unusedPort()),
  MQTT_WSS_PORT: String(await unusedPort())
})

const linesOf = (stdout: string) => stdout.trim().split("\n")

describe.each(["pglite", "postgres"] as const)("voltaic doctor and migrate on a new %s database", (kind) => {
  it(`doctor names the migrations missing, migrate applies them and says which, then doctor passes${kind === "postgres" ? "; migrate again has none to apply" : ""}`, async () => {
    const dir = await stores.dir()
    // Valid for 10 days: a warning, which does not fail the check.
    const tls = makeCertificate(dir, `soon-${kind}`, 10)
    const env = { ...(await stores.env(kind, "fresh")), ...(await unusedPorts()), NATS_URL, TLS_CERT_FILE: tls.cert, TLS_KEY_FILE: tls.key }

    const before = await runCli(["doctor"], env)
    expect(before.code).toBe(1)
    const missing = kind === "pglite"
      ? /^✗ database: PGlite in .+: no database there yet: run voltaic migrate/
      : new RegExp(`^✗ database: Postgres at postgres://.+: ${MIGRATIONS.length} of ${MIGRATIONS.length} migrations not applied \\(${MIGRATIONS[0]} … ${MIGRATIONS.at(-1)}\\): run voltaic migrate`)
    expect(linesOf(before.stdout).filter((l) => l.startsWith("✗"))).toEqual([expect.stringMatching(missing)])
    expect(stderrLines(before.stderr)).toEqual(["voltaic: 1 check failed (✗ above)"])

    const migrated = await runCli(["migrate"], env)
    expect(migrated.stderr).toBe("")
    expect(migrated.code).toBe(0)
    expect(linesOf(migrated.stdout)).toEqual([
      expect.stringMatching(new RegExp(`^${kind === "pglite" ? "PGlite in" : "Postgres at"} .+: applied ${MIGRATIONS.length} migrations:$`)),
      ...MIGRATIONS.map((name) => `  ${name}`),
      `The schema is current (${MIGRATIONS.length} migrations, the last ${MIGRATIONS.at(-1)}).`
    ])

    // Ports picked again, so a pick is never reused across runs of doctor.
    const ports = await unusedPorts()
    const after = await runCli(["doctor"], { ...env, ...ports })
    expect(after.stderr, after.stdout).toBe("")
    expect(after.code).toBe(0)
    const lines = linesOf(after.stdout)
    expect(lines.map((l) => l.split(":")[0])).toEqual([
      "✓ configuration",
      "✓ PORT",
      "✓ MQTT_PORT",
      "✓ MQTT_WS_PORT",
      "✓ COAP_PORT",
      "✓ HTTPS_PORT",
      "✓ MQTTS_PORT",
      "✓ MQTT_WSS_PORT",
      "✓ database",
      "✓ NATS_URL",
      "! TLS_CERT_FILE"
    ])
    expect(lines).toContain(`✓ PORT: 127.0.0.1:${ports.PORT} is free`)
    expect(lines).toContain(`✓ COAP_PORT: 127.0.0.1:${ports.COAP_PORT} (UDP) is free`)
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^✓ database: .+: reachable, the schema is current \\(${MIGRATIONS.length} migrations\\)$`)))
    expect(lines).toContainEqual(expect.stringMatching(/^! TLS_CERT_FILE: the certificate in .+ \(CN=soon-\w+\) expires in 9 days, on \d{4}-\d\d-\d\d: renew it soon$/))

    if (kind === "postgres") {
      const again = await runCli(["migrate"], env)
      expect(again.code).toBe(0)
      expect(again.stdout).toMatch(new RegExp(`: the schema is current \\(${MIGRATIONS.length} migrations, the last ${MIGRATIONS.at(-1)}\\); nothing to apply\\.\\n$`))
    }
  }, 120_000)
})

const listen = (server: Server) => new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port)))
const bindUdp = (socket: Socket) => new Promise<number>((resolve) => socket.bind(0, "127.0.0.1", () => resolve(socket.address().port)))

describe("voltaic doctor, when things are wrong", () => {
  it("names each: a port in use and by whom, two listeners on one port, NATS not answering, a key not the certificate's", async () => {
    const dir = await stores.dir()
    const tcp = createServer()
    const udp = createSocket("udp4")
    const closedNats = await unusedPort()
    try {
      const [taken, takenUdp] = [await listen(tcp), await bindUdp(udp)]
      const one = makeCertificate(dir, "one", 365)
      const other = makeCertificate(dir, "other", 365)
      const ports = await unusedPorts()
      const env = {
        ...ports,
        DATABASE_URL: "memory://",
        MQTT_PORT: String(taken),
        COAP_PORT: String(takenUdp),
        MQTT_WS_PORT: ports.PORT,
        NATS_URL: `nats://127.0.0.1:${closedNats}`,
        TLS_CERT_FILE: one.cert,
        TLS_KEY_FILE: other.key
      }
      const doctor = await runCli(["doctor"], env)
      expect(doctor.code).toBe(1)
      const failed = linesOf(doctor.stdout).filter((l) => l.startsWith("✗"))
      expect(failed).toEqual([
        expect.stringMatching(new RegExp(`^✗ MQTT_PORT: 127\\.0\\.0\\.1:${taken} is already in use by process ${process.pid} \\(.+\\): stop it, or set MQTT_PORT to another port$`)),
        `✗ MQTT_WS_PORT: ${ports.PORT} is PORT's port too: give each listener its own`,
        expect.stringMatching(new RegExp(`^✗ COAP_PORT: 127\\.0\\.0\\.1:${takenUdp} \\(UDP\\) is already in use by process ${process.pid} `)),
        expect.stringMatching(new RegExp(`^✗ NATS_URL: cannot reach NATS at nats://127\\.0\\.0\\.1:${closedNats} \\(.+\\): start NATS there, or fix NATS_URL`)),
        `✗ TLS_KEY_FILE: ${other.key} is not the key of the certificate in ${one.cert}: give the key the certificate was made with`
      ])
      expect(linesOf(doctor.stdout)).toContain("✓ database: PGlite in memory (DATABASE_URL=memory://): made afresh at each start, nothing to check")
      expect(stderrLines(doctor.stderr)).toEqual(["voltaic: 5 checks failed (✗ above)"])

      const unparsable = await runCli(["doctor"], { ...env, PORT: "http" })
      expect(unparsable.code).toBe(1)
      expect(linesOf(unparsable.stdout)).toEqual([
        "✗ configuration: PORT: must be a port from 0 to 65535, or off; got http",
        "  (the other checks need the configuration)"
      ])
    } finally {
      tcp.close()
      udp.close()
    }
  }, 60_000)
})
