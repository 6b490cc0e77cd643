import { Cause, Context, Exit } from "effect"
import { execFile, execFileSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import mqtt from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ListenFailed, ListenersFailed } from "../../src/adapters/http/HttpListener.ts"
import { MqttServer } from "../../src/adapters/mqtt/MqttServer.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { bindMqttListeners, type MqttTestApp, seed, type Seeded, startMqttApp, WAIT_MS } from "../support/mqtt.ts"

/** A self-signed certificate for localhost and 127.0.0.1, made for this run, and a second one nobody trusts. */
const makeCertificates = (dir: string) => {
  const make = (name: string) => {
    execFileSync("openssl", [
      "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", `/CN=${name}`,
      "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
      "-keyout", join(dir, `${name}.key`), "-out", join(dir, `${name}.crt`)
    ], { stdio: "ignore" })
    return { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) }
  }
  return { server: make("voltaic-test"), stranger: make("stranger") }
}

const run = (command: string, args: Array<string>) =>
  new Promise<{ code: number; output: string }>((resolve) => {
    execFile(command, args, { timeout: WAIT_MS }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1
      resolve({ code, output: stdout + stderr })
    })
  })

describe("TLS: MQTT over TLS and secure WebSocket, and HTTPS, from TLS_CERT_FILE and TLS_KEY_FILE", () => {
  const dir = mkdtempSync(join(tmpdir(), "voltaic-tls-"))
  const certs = makeCertificates(dir)
  let t: MqttTestApp
  let s: Seeded
  beforeAll(async () => {
    t = await startMqttApp("pglite", {
      listen: true,
      env: { TLS_CERT_FILE: certs.server.cert, TLS_KEY_FILE: certs.server.key, HTTPS_PORT: "0", MQTTS_PORT: "0", MQTT_WSS_PORT: "0" }
    })
    s = await seed(t)
  })
  afterAll(async () => {
    await t?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  const events = async (name: string) =>
    (await t.call("GET", `/events?device.id=${s.device.id}&name=${name}`)).body.events.map((e: { data: unknown }) => e.data)

  it("opens the TLS listeners beside the plain ones, and logs each", () => {
    expect(t.server?.tlsPort).toBeGreaterThan(0)
    expect(t.server?.wssPort).toBeGreaterThan(0)
    expect(t.httpsPort).toBeGreaterThan(0)
    expect(t.server?.port).toBeGreaterThan(0)
    expect(t.httpPort).toBeGreaterThan(0)
  })

  it("stores what mosquitto_pub publishes over TLS with --cafile; a client that does not trust the certificate is refused", async () => {
    const publish = (ca: string) =>
      run("mosquitto_pub", [
        "-h", "localhost", "-p", String(t.server?.tlsPort), "--cafile", ca,
        "-u", s.device.key, "-P", " ", "-q", "1", "-t", `devices/${s.device.id}/events/secure`, "-m", '{"data":{"over":"tls"}}'
      ])
    expect(await publish(certs.server.cert)).toEqual({ code: 0, output: "" })
    expect(await events("secure")).toEqual([{ over: "tls" }])
    const refused = await publish(certs.stranger.cert)
    expect(refused.code).not.toBe(0)
    expect(await events("secure")).toHaveLength(1)
    // Plain MQTT spoken to the TLS port is no MQTT connection either.
    expect((await run("mosquitto_pub", ["-h", "127.0.0.1", "-p", String(t.server?.tlsPort), "-u", s.device.key, "-P", " ", "-t", "events", "-m", "{}"])).code).not.toBe(0)
  })

  it("answers REST over HTTPS to curl --cacert, and curl refuses the certificate without it", async () => {
    const url = `https://localhost:${t.httpsPort}/v1/devices/${s.device.id}`
    const trusted = await run("curl", ["-sS", "--cacert", certs.server.cert, "-H", `authorization: Bearer ${BOOTSTRAP_KEY}`, url])
    expect(trusted.code).toBe(0)
    expect(JSON.parse(trusted.output)).toMatchObject({ id: s.device.id })
    const untrusted = await run("curl", ["-sS", "--cacert", certs.stranger.cert, url])
    // 60: the peer's certificate cannot be verified.
    expect(untrusted.code).toBe(60)
  })

  it("takes MQTT over secure WebSocket from a client that trusts the certificate", async () => {
    const ca = execFileSync("cat", [certs.server.cert])
    const client = await mqtt.connectAsync(`wss://localhost:${t.server?.wssPort}`, {
      ca, username: s.device.key, password: " ", reconnectPeriod: 0, connectTimeout: WAIT_MS, protocolVersion: 4
    })
    try {
      await client.publishAsync(`devices/${s.device.id}/events/wss`, JSON.stringify({ data: { over: "wss" } }), { qos: 1 })
    } finally {
      await client.endAsync()
    }
    expect(await events("wss")).toEqual([{ over: "wss" }])
    await expect(mqtt.connectAsync(`wss://localhost:${t.server?.wssPort}`, {
      ca: execFileSync("cat", [certs.stranger.cert]), username: s.device.key, password: " ", reconnectPeriod: 0, connectTimeout: WAIT_MS
    })).rejects.toThrow()
  })
})

describe("TLS settings", () => {
  const dir = mkdtempSync(join(tmpdir(), "voltaic-tls-settings-"))
  const certs = makeCertificates(dir)
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  const start = (env: Record<string, string>) =>
    bindMqttListeners({ MQTT_PORT: "0", MQTT_WS_PORT: "0", MQTTS_PORT: "0", MQTT_WSS_PORT: "0", ...env })
  /** The start-up failure as its one line names it (`SETTING: reason`). */
  const failure = (exit: Exit.Exit<unknown, unknown>) => {
    const error = Exit.isFailure(exit) ? exit.cause.reasons.find(Cause.isFailReason)?.error : undefined
    return error instanceof ListenersFailed ? error.line : error instanceof ListenFailed ? `${error.setting}: ${error.message}` : String(error)
  }

  it("switches a plain listener off with `off`, and opens the TLS ones only with a certificate", async () => {
    const ports = (exit: Exit.Exit<Context.Context<MqttServer>, unknown>) => {
      if (Exit.isFailure(exit)) throw new Error(failure(exit))
      const server = Context.get(exit.value, MqttServer)
      return [server.port, server.wsPort, server.tlsPort, server.wssPort].map((p) => (p === null ? null : "bound"))
    }
    expect(ports(await start({ TLS_CERT_FILE: certs.server.cert, TLS_KEY_FILE: certs.server.key, MQTT_PORT: "off", MQTT_WS_PORT: "OFF" })))
      .toEqual([null, null, "bound", "bound"])
    expect(ports(await start({ TLS_CERT_FILE: certs.server.cert, TLS_KEY_FILE: certs.server.key, MQTT_WSS_PORT: "off" })))
      .toEqual(["bound", "bound", "bound", null])
    expect(ports(await start({}))).toEqual(["bound", "bound", null, null])
  })

  it("refuses a certificate without its key, a file it cannot read, and a key of another certificate, naming the setting", async () => {
    expect(failure(await start({ TLS_CERT_FILE: certs.server.cert }))).toContain("TLS_KEY_FILE: must be set with TLS_CERT_FILE")
    expect(failure(await start({ TLS_CERT_FILE: join(dir, "missing.crt"), TLS_KEY_FILE: certs.server.key }))).toMatch(/^TLS_CERT_FILE: .*missing\.crt cannot be read/)
    expect(failure(await start({ TLS_CERT_FILE: certs.server.cert, TLS_KEY_FILE: certs.stranger.key }))).toMatch(/^TLS_KEY_FILE: .* is not the key of the certificate/)
    // The setting at fault, as voltaic doctor names it: a file that is no certificate is TLS_CERT_FILE's.
    writeFileSync(join(dir, "garbage.crt"), "not a certificate")
    expect(failure(await start({ TLS_CERT_FILE: join(dir, "garbage.crt"), TLS_KEY_FILE: certs.server.key }))).toMatch(/^TLS_CERT_FILE: .*garbage\.crt is not a PEM certificate/)
    expect(failure(await start({ TLS_CERT_FILE: certs.server.cert, TLS_KEY_FILE: join(dir, "garbage.crt") }))).toMatch(/^TLS_KEY_FILE: .*garbage\.crt is not an unencrypted PEM private key/)
    // Both TLS listeners refuse it: said once.
    const twice = new ListenFailed({ setting: "TLS_CERT_FILE", message: "x.crt is not a PEM certificate" })
    expect(new ListenersFailed({ failures: [twice, twice] }).line).toBe("TLS_CERT_FILE: x.crt is not a PEM certificate")
    for (const text of ["eighty", "0x50", "1e3", "-1"]) {
      expect(failure(await start({ MQTTS_PORT: text }))).toContain(`MQTTS_PORT: must be a port from 0 to 65535, or off; got ${text}`)
    }
  })
})
