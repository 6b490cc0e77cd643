import { execFile, execFileSync, spawn } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { type MqttTestApp, seed, type Seeded, startMqttApp, WAIT_MS, within } from "../support/mqtt.ts"

const installed = (() => {
  try {
    execFileSync("mosquitto_pub", ["--help"], { stdio: "ignore" })
    return true
  } catch (error) {
    // `--help` exits 1 when the tool is there.
    return typeof error === "object" && error !== null && "status" in error && error.status === 1
  }
})()

/** Interoperability with Eclipse Mosquitto's command-line clients (Debian package mosquitto-clients). */
describe("MQTT with mosquitto_pub and mosquitto_sub", () => {
  let t: MqttTestApp
  let s: Seeded
  let port: string
  beforeAll(async () => {
    if (!installed) throw new Error("mosquitto_pub is missing: apt-get install -y mosquitto-clients")
    t = await startMqttApp("pglite", { listen: true })
    s = await seed(t)
    port = String(t.server?.port)
  })
  afterAll(() => t?.close())

  const pub = (args: Array<string>) =>
    new Promise<{ code: number; output: string }>((resolve) => {
      execFile("mosquitto_pub", ["-h", "127.0.0.1", "-p", port, ...args], { timeout: WAIT_MS }, (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1
        resolve({ code, output: stdout + stderr })
      })
    })

  it("stores what mosquitto_pub publishes with a device key as username and one space as password", async () => {
    const published = await pub(["-u", s.device.key, "-P", " ", "-q", "1", "-t", `devices/${s.device.id}/events/boiler`, "-m", '{"data":{"on":true}}'])
    expect(published).toEqual({ code: 0, output: "" })
    const stored = await t.call("GET", `/events?device.id=${s.device.id}&name=boiler`)
    expect(stored.body.events.map((e: { data: unknown }) => e.data)).toEqual([{ on: true }])
    const short = await pub(["-u", s.device.key, "-P", " ", "-q", "1", "-t", "locations", "-m", '{"latitude":1.25,"longitude":2.5}'])
    expect(short.code).toBe(0)
    expect((await t.call("GET", `/locations?device.id=${s.device.id}`)).body.locations[0]).toMatchObject({ latitude: "1.25", longitude: "2.5" })
    // Not JSON: acknowledged (MQTT 3.1.1 cannot refuse) but not stored.
    expect((await pub(["-u", s.device.key, "-P", " ", "-q", "1", "-t", `devices/${s.device.id}/events/boiler`, "-m", "on"])).code).toBe(0)
    expect((await t.call("GET", `/events?device.id=${s.device.id}&name=boiler`)).body.count).toBe(1)
    // An unknown key is refused at CONNECT.
    expect((await pub(["-u", "d_sk_unknown", "-t", "events", "-m", "{}"])).code).not.toBe(0)
  })

  it("delivers an event published over REST to mosquitto_sub", async () => {
    // Line-buffered, so its debug lines (CONNACK, SUBACK) arrive as they happen.
    const args = ["-h", "127.0.0.1", "-p", port, "-u", BOOTSTRAP_KEY, "-t", `devices/${s.device.id}/events/+`, "-C", "1", "-d"]
    const sub = spawn("stdbuf", ["-oL", "mosquitto_sub", ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    let subscribed: () => void = () => {}
    const ready = new Promise<void>((resolve) => (subscribed = resolve))
    sub.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString()
      if (/received SUBACK/.test(output)) subscribed()
    })
    sub.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const exited = new Promise<number | null>((resolve) => sub.once("exit", (code) => resolve(code)))
    try {
      await within(ready, "mosquitto_sub to subscribe")
      const posted = await t.call("POST", "/events", { body: { name: "tariff", data: { rate: 0.31 }, device: { id: s.device.id } } })
      expect(posted.status).toBe(200)
      expect(await within(exited, "mosquitto_sub to receive one message and exit")).toBe(0)
      const line = output.split("\n").find((l) => l.startsWith("{"))
      expect(JSON.parse(line ?? "null")).toEqual(posted.body)
    } finally {
      if (sub.exitCode === null) sub.kill("SIGKILL")
    }
  })
})
