import { execFileSync, spawn, spawnSync } from "node:child_process"
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import mqtt from "mqtt"
import { createServer } from "node:net"
import { createSocket } from "node:dgram"
import { describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "./support/app.ts"
import { createPostgresDatabase } from "./support/databases.ts"
import { ROOT, spawnNpmStart, startServerProcess } from "./support/process.ts"

/** Whether a TCP port on 127.0.0.1 can be bound (nobody holds it). */
const tcpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

const udpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createSocket("udp4")
    socket.once("error", () => resolve(false))
    socket.bind(port, "127.0.0.1", () => socket.close(() => resolve(true)))
  })

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("npm start: the built JavaScript, stopped by a signal to npm", () => {
  it("runs dist/ under node (no tsx), and SIGTERM to the npm process stops the server and frees every port within 10 s", async () => {
    const server = await startServerProcess({ DATABASE_URL: "memory://" }, 180_000, spawnNpmStart)
    const npmPid = server.child.pid!
    // npm's child is the server itself: the script execs node after the build.
    const children = execFileSync("pgrep", ["-P", String(npmPid)], { encoding: "utf8" }).trim().split("\n").map(Number)
    expect(children).toHaveLength(1)
    const command = execFileSync("ps", ["-o", "args=", "-p", String(children[0])], { encoding: "utf8" })
    expect(command).toContain("dist/src/main.js")
    expect(command).not.toContain("tsx")
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/health`)
    expect(res.status).toBe(200)

    const signalled = Date.now()
    const code = await server.stop("SIGTERM")
    const took = Date.now() - signalled
    expect(took).toBeLessThan(10_000)
    expect(code).toBe(0)
    expect(alive(children[0])).toBe(false)
    for (const port of [server.port, server.mqttPort, server.mqttWsPort]) expect(await tcpFree(port)).toBe(true)
    expect(await udpFree(server.coapPort)).toBe(true)
  }, 240_000)

  it("builds the package's bin, dist/src/cli/main.js: an executable with a shebang that runs the built tool", () => {
    execFileSync(process.execPath, ["scripts/build.mjs", "--if-needed"], { cwd: ROOT, stdio: "ignore" })
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"))
    expect(pkg.bin).toEqual({ voltaic: "dist/src/cli/main.js" })
    const bin = join(ROOT, pkg.bin.voltaic)
    expect(readFileSync(bin, "utf8").split("\n")[0]).toBe("#!/usr/bin/env node")
    accessSync(bin, constants.X_OK)
    // Run by its shebang, from the built JavaScript with the migrations copied beside it.
    const migrated = spawnSync(bin, ["migrate"], { cwd: ROOT, env: { ...process.env, DATABASE_URL: "memory://" }, encoding: "utf8" })
    expect(migrated.stderr).toBe("")
    expect(migrated.status).toBe(0)
    expect(migrated.stdout).toMatch(/^PGlite in memory: applied \d+ migrations:\n  0001_init\.sql\n/)
  }, 240_000)

  it("scripts/cluster.sh starts NATS and two processes on one Postgres database; a publish to one reaches a subscriber of the other; SIGTERM stops them all", async () => {
    /** A base port whose next one is free too, for TCP (HTTP, MQTT, WebSocket) or UDP (CoAP). */
    const freeBase = async (free: (port: number) => Promise<boolean>, taken: Set<number>): Promise<number> => {
      for (;;) {
        const base = 20_000 + Math.floor(Math.random() * 20_000)
        if (taken.has(base) || taken.has(base + 1)) continue
        if ((await free(base)) && (await free(base + 1))) {
          taken.add(base).add(base + 1)
          return base
        }
      }
    }
    const taken = new Set<number>()
    const [http, mqttBase, ws, nats] = [await freeBase(tcpFree, taken), await freeBase(tcpFree, taken), await freeBase(tcpFree, taken), await freeBase(tcpFree, taken)]
    const coap = await freeBase(udpFree, new Set())
    const db = await createPostgresDatabase()
    const logDir = mkdtempSync(join(tmpdir(), "voltaic-cluster-"))
    const env: Record<string, string | undefined> = {
      ...process.env,
      DATABASE_URL: db.url,
      HOST: "127.0.0.1",
      HTTP_BASE: String(http),
      MQTT_BASE: String(mqttBase),
      MQTT_WS_BASE: String(ws),
      COAP_BASE: String(coap),
      NATS_PORT: String(nats),
      LOG_DIR: logDir,
      BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
      LOG_LEVEL: "info"
    }
    // Its own NATS, as the script starts one when none is given.
    delete env.NATS_URL
    const script = spawn("bash", ["scripts/cluster.sh"], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    script.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    script.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const exited = new Promise<number | null>((resolve) => script.once("exit", (code) => resolve(code)))
    const log = (i: number) => (existsSync(join(logDir, `voltaic-${i}.log`)) ? readFileSync(join(logDir, `voltaic-${i}.log`), "utf8") : "")
    const clients: Array<mqtt.MqttClient> = []
    try {
      const deadline = Date.now() + 150_000
      while (![0, 1].every((i) => /coap listening on/.test(log(i)) && /http listening on/.test(log(i)))) {
        if (script.exitCode !== null) throw new Error(`cluster.sh exited ${script.exitCode}:\n${output}\n${log(0)}\n${log(1)}`)
        if (Date.now() > deadline) throw new Error(`the two processes did not start:\n${output}\n${log(0)}\n${log(1)}`)
        await new Promise((r) => setTimeout(r, 200))
      }
      expect(output).toContain(`cluster: nats-server on nats://127.0.0.1:${nats}`)
      const call = async (path: string, body: unknown) =>
        (await fetch(`http://127.0.0.1:${http}/v1${path}`, {
          method: "POST",
          headers: { authorization: `Bearer ${BOOTSTRAP_KEY}`, "content-type": "application/json" },
          body: JSON.stringify(body)
        })).json() as Promise<{ id: string; secretKey: string }>
      const space = await call("/spaces", { name: "Cluster" })
      const device = await call("/devices", { name: "Across", space: { id: space.id } })
      // The application listens on process 1; the device publishes to process 0.
      const app = await mqtt.connectAsync(`mqtt://127.0.0.1:${mqttBase + 1}`, { username: BOOTSTRAP_KEY, password: " ", reconnectPeriod: 0 })
      clients.push(app)
      await app.subscribeAsync(`devices/${device.id}/events/+`, { qos: 1 })
      const received = new Promise<string>((resolve) => app.on("message", (_topic, payload) => resolve(payload.toString())))
      const meter = await mqtt.connectAsync(`mqtt://127.0.0.1:${mqttBase}`, { username: device.secretKey, password: " ", reconnectPeriod: 0 })
      clients.push(meter)
      await meter.publishAsync(`devices/${device.id}/events/power`, JSON.stringify({ data: 42 }), { qos: 1 })
      const delivered = await Promise.race([received, new Promise<never>((_, reject) => setTimeout(() => reject(new Error("no delivery across the processes in 10 s")), 10_000))])
      expect(JSON.parse(delivered)).toMatchObject({ name: "power", data: 42, device: { id: device.id } })
      for (const client of clients.splice(0)) await client.endAsync(true)

      script.kill("SIGTERM")
      expect(await exited).toBe(0)
      for (const port of [http, http + 1, mqttBase, mqttBase + 1, ws, ws + 1, nats]) expect(await tcpFree(port)).toBe(true)
      for (const port of [coap, coap + 1]) expect(await udpFree(port)).toBe(true)
    } finally {
      for (const client of clients) await client.endAsync(true)
      if (script.exitCode === null) {
        script.kill("SIGTERM")
        await exited
      }
      rmSync(logDir, { recursive: true, force: true })
      await db.drop()
    }
  }, 240_000)
})
