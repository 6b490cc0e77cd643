import { Cause, Exit } from "effect"
import type { MqttClient } from "mqtt"
import { connect as connectTcp } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ListenFailed, ListenersFailed } from "../../src/adapters/http/HttpListener.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import {
  bindMqttListeners,
  closedBy,
  collect,
  connectUrl,
  type MqttTestApp,
  nextMessage,
  seed,
  type Seeded,
  startMqttApp,
  subscribe,
  within
} from "../support/mqtt.ts"

/** End to end over real sockets on port 0, with the `mqtt` client over TCP and WebSocket. */
describe("MQTT over TCP and WebSocket", () => {
  let t: MqttTestApp
  let s: Seeded
  let tcpUrl: string
  let wsUrl: string
  const opened: Array<MqttClient> = []
  beforeAll(async () => {
    t = await startMqttApp("pglite", { listen: true, env: { LOG_LEVEL: "info" } })
    s = await seed(t)
    tcpUrl = `mqtt://127.0.0.1:${t.server?.port}`
    wsUrl = `ws://127.0.0.1:${t.server?.wsPort}/mqtt`
  })
  afterAll(async () => {
    await Promise.all(opened.map((client) => client.endAsync(true)))
    await t?.close()
  })

  const open = async (url: string, username: string) => {
    const client = await connectUrl(url, { username, password: " " })
    opened.push(client)
    return client
  }
  const events = async (name: string) => (await t.call("GET", `/events?device.id=${s.device.id}&name=${name}&limit=200`)).body

  it("binds free ports and logs them", () => {
    expect(t.server?.port).toBeGreaterThan(0)
    expect(t.server?.wsPort).toBeGreaterThan(0)
    const lines = t.logs.map((l) => l.message)
    expect(lines).toContain(`mqtt listening on 127.0.0.1:${t.server?.port}`)
    expect(lines).toContain(`mqtt-ws listening on 127.0.0.1:${t.server?.wsPort}`)
  })

  for (const [via, deviceUrl, appUrl] of [["TCP", () => tcpUrl, () => wsUrl], ["WebSocket", () => wsUrl, () => tcpUrl]] as const) {
    it(`stores events a device publishes over ${via} at QoS 0 and 1 and delivers the stored Event`, async () => {
      const app = await open(appUrl(), BOOTSTRAP_KEY)
      expect(await subscribe(app, `devices/${s.device.id}/events/+`)).toEqual([1])
      const device = await open(deviceUrl(), s.device.key)
      const name = `reading-${via}`
      const received = collect(app)
      const atQos1 = nextMessage(app, (topic) => topic.endsWith(`/${name}`))
      await device.publishAsync(`devices/${s.device.id}/events/${name}`, JSON.stringify({ data: { kwh: 1.5 } }), { qos: 1 })
      const stored = await events(name)
      expect(stored.count).toBe(1)
      expect((await atQos1).json).toEqual(stored.events[0])
      const atQos0 = nextMessage(app, (topic) => topic.endsWith(`/${name}`))
      await device.publishAsync(`devices/${s.device.id}/events/${name}`, "2", { qos: 0 })
      expect((await atQos0).json).toMatchObject({ name, data: 2, device: { id: s.device.id } })
      const short = nextMessage(app, (topic) => topic.endsWith(`/${name}`))
      await device.publishAsync("events", JSON.stringify({ name, data: 3 }), { qos: 1 })
      expect((await short).json).toMatchObject({ name, data: 3 })
      expect((await events(name)).count).toBe(3)
      expect(received.map((m) => Object.keys(m.json).sort().join())).toEqual(Array(3).fill("data,device,id,name,timestamp"))
      const locations = nextMessage(app, (topic) => topic.endsWith("/locations"))
      await subscribe(app, `devices/${s.device.id}/locations`)
      await device.publishAsync(`devices/${s.device.id}/locations`, JSON.stringify({ latitude: 10, longitude: "20.5" }), { qos: 1 })
      const location = await locations
      expect(location.json).toMatchObject({ latitude: "10", longitude: "20.5", device: { id: s.device.id } })
      expect((await t.call("GET", `/locations/${location.json.id}`)).body).toEqual(location.json)
      await Promise.all([app.endAsync(), device.endAsync()])
    })
  }

  it("delivers a command run over REST to the device subscribed to its run topic", async () => {
    expect((await t.call("POST", "/commands", { body: { name: "Open Valve", device: { id: s.device.id } } })).status).toBe(200)
    const device = await open(tcpUrl, s.device.key)
    expect(await subscribe(device, `devices/${s.device.id}/commands/open-valve/run`)).toEqual([1])
    const delivered = nextMessage(device)
    const run = await t.call("POST", "/commands/run", { body: { slug: "open-valve", device: { id: s.device.id }, data: { percent: 40 } } })
    expect(run.status).toBe(200)
    const message = await delivered
    expect(message.topic).toBe(`devices/${s.device.id}/commands/open-valve/run`)
    expect(message.json).toEqual({ id: run.body.id, slug: "open-valve", data: { percent: 40 }, device: { id: s.device.id }, timestamp: run.body.timestamp })
    await device.endAsync()
  })

  it("enforces who may publish and subscribe what", async () => {
    const device = await open(tcpUrl, s.device.key)
    const tenant = await open(wsUrl, s.tenant.appKey)
    await device.publishAsync(`devices/${s.other.id}/events/spoof`, "1", { qos: 1 })
    await device.publishAsync(`devices/${s.device.id}/events/binary`, Buffer.from([0xde, 0xad, 0xbe, 0xef]), { qos: 1 })
    expect((await t.call("GET", `/events?device.id=${s.other.id}&name=spoof`)).body.count).toBe(0)
    expect((await events("binary")).count).toBe(0)
    expect(await subscribe(tenant, `devices/${s.device.id}/events/+`)).toEqual([128])
    expect(await subscribe(tenant, `devices/${s.tenant.deviceId}/events/+`)).toEqual([1])
    expect(await subscribe(device, ["devices/+/events/+", `devices/${s.other.id}/locations`, `devices/${s.device.id}/locations`])).toEqual([128, 128, 1])
    await Promise.all([device.endAsync(), tenant.endAsync()])
  })

  it("closes only a TCP connection that sends garbage", async () => {
    const app = await open(tcpUrl, BOOTSTRAP_KEY)
    await subscribe(app, `devices/${s.device.id}/events/+`)
    const closings = () => t.logs.filter((l) => /mqtt connection of .* closed/.test(l.message)).length
    const before = closings()
    const raw = connectTcp(t.server?.port ?? 0, "127.0.0.1")
    const closed = new Promise<void>((resolve) => raw.once("close", () => resolve()))
    raw.on("error", () => {})
    raw.write(Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
    await within(closed, "the garbage connection to close")
    expect(closings() - before).toBe(1)
    expect(app.connected).toBe(true)
    const after = nextMessage(app, (topic) => topic.endsWith("/after-garbage"))
    await app.publishAsync(`devices/${s.device.id}/events/after-garbage`, "1", { qos: 1 })
    await after
    await app.endAsync()
  })

  it("disconnects a device's sessions within a second of rotating its key", async () => {
    const overTcp = await open(tcpUrl, s.other.key)
    const overWs = await open(wsUrl, s.other.key)
    const gone = Promise.all([closedBy(overTcp, 1_000), closedBy(overWs, 1_000)])
    const rotated = await t.call("POST", `/devices/${s.other.id}/secretKey`)
    expect(rotated.status).toBe(200)
    await gone
    await expect(connectUrl(tcpUrl, { username: s.other.key })).rejects.toThrow(/Bad username or password/)
    const fresh = await open(tcpUrl, rotated.body.secretKey)
    expect(fresh.connected).toBe(true)
    await fresh.endAsync()
  })

  it("answers a plain HTTP request on the WebSocket port with 426", async () => {
    const res = await fetch(`http://127.0.0.1:${t.server?.wsPort}/`)
    expect(res.status).toBe(426)
  })

  it("fails start-up naming MQTT_PORT, MQTT_WS_PORT or both when ports are in use", async () => {
    const startupFailure = async (env: Record<string, string>) => {
      const exit = await bindMqttListeners(env)
      return Exit.isFailure(exit) ? exit.cause.reasons.find(Cause.isFailReason)?.error : undefined
    }
    const tcpInUse = new ListenFailed({ setting: "MQTT_PORT", message: `127.0.0.1:${t.server?.port} is already in use` })
    const wsInUse = new ListenFailed({ setting: "MQTT_WS_PORT", message: `127.0.0.1:${t.server?.wsPort} is already in use` })
    expect(await startupFailure({ MQTT_PORT: String(t.server?.port), MQTT_WS_PORT: "0" })).toEqual(
      new ListenersFailed({ failures: [tcpInUse] })
    )
    expect(await startupFailure({ MQTT_PORT: "0", MQTT_WS_PORT: String(t.server?.wsPort) })).toEqual(
      new ListenersFailed({ failures: [wsInUse] })
    )
    expect(await startupFailure({ MQTT_PORT: String(t.server?.port), MQTT_WS_PORT: String(t.server?.wsPort) })).toEqual(
      new ListenersFailed({ failures: [tcpInUse, wsInUse] })
    )
  })
})

describe("MQTT listeners when the scope closes", () => {
  it("close every connection, including those that never sent CONNECT", async () => {
    const t = await startMqttApp("pglite", { listen: true })
    const client = await connectUrl(`mqtt://127.0.0.1:${t.server?.port}`, { username: BOOTSTRAP_KEY })
    const overWs = await connectUrl(`ws://127.0.0.1:${t.server?.wsPort}`, { username: BOOTSTRAP_KEY })
    const raw = connectTcp(t.server?.port ?? 0, "127.0.0.1")
    raw.on("error", () => {})
    await within(new Promise((resolve) => raw.once("connect", resolve)), "the raw connection")
    const rawClosed = within(new Promise<void>((resolve) => raw.once("close", () => resolve())), "the raw connection to close")
    const closed = Promise.all([closedBy(client), closedBy(overWs), rawClosed])
    await within(t.close(), "the scope to close")
    await closed
  })
})
