import type { MqttClient } from "mqtt"
import net from "node:net"
import type { Duplex } from "node:stream"
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest"
import WebSocket from "ws"
import { MAX_PACKET_BYTES, MAX_PACKET_BYTES_UNAUTHENTICATED } from "../../src/adapters/mqtt/guard.ts"
import { MAX_REFUSALS } from "../../src/adapters/mqtt/MqttBroker.ts"
import { MAX_QUEUED_PER_CLIENT } from "../../src/adapters/mqtt/persistence.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { closedBy, collect, duplexPair, type MqttTestApp, nextMessage, seed, type Seeded, startMqttApp, subscribe, within } from "../support/mqtt.ts"

/** MQTT's variable byte integer (§1.5.5). */
const varint = (value: number): Array<number> => {
  const bytes: Array<number> = []
  do {
    let byte = value % 128
    value = Math.floor(value / 128)
    if (value > 0) byte |= 0x80
    bytes.push(byte)
  } while (value > 0)
  return bytes
}

const mqttString = (bytes: Buffer) => Buffer.concat([Buffer.from([bytes.length >> 8, bytes.length & 0xff]), bytes])

/** A CONNECT of MQTT 3.1.1 with a clean session and the credential as username. */
const connectPacket = (username: string, clientId = "raw") => {
  const body = Buffer.concat([
    mqttString(Buffer.from("MQTT")),
    Buffer.from([4, 0x82, 0, 60]),
    mqttString(Buffer.from(clientId)),
    mqttString(Buffer.from(username))
  ])
  return Buffer.concat([Buffer.from([0x10, ...varint(body.length)]), body])
}

/** A QoS 0 PUBLISH whose topic is the given bytes, taken as they are. */
const publishPacket = (topic: Buffer, payload: Buffer) => {
  const body = Buffer.concat([mqttString(topic), payload])
  return Buffer.concat([Buffer.from([0x30, ...varint(body.length)]), body])
}

const closeOf = (stream: Duplex) => new Promise<void>((resolve) => stream.once("close", () => resolve()))

/** Resolves with the first `count` bytes the stream receives. */
const firstBytes = (stream: Duplex, count: number) =>
  new Promise<Buffer>((resolve) => {
    let received = Buffer.alloc(0)
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk])
      if (received.length >= count) {
        stream.off("data", onData)
        resolve(received.subarray(0, count))
      }
    }
    stream.on("data", onData)
  })

describe("MQTT limits in memory", () => {
  let t: MqttTestApp
  let s: Seeded
  let app: MqttClient
  beforeAll(async () => {
    t = await startMqttApp("pglite")
    s = await seed(t)
    app = await t.connectInMemory({ username: BOOTSTRAP_KEY })
  })
  afterAll(() => t?.close())
  afterEach(() => {
    vi.useRealTimers()
  })

  const asDevice = (key = s.device.key) => t.connectInMemory({ username: key })
  const linesSince = (before: number, pattern: RegExp) => t.logs.slice(before).filter((l) => pattern.test(l.message))
  const events = async (name: string) => (await t.call("GET", `/events?device.id=${s.device.id}&name=${name}&limit=1`)).body.count

  it("closes a connection whose packet declares more than the limit before CONNECT, once the length is read", async () => {
    const before = t.logs.length
    const [near, far] = duplexPair()
    const closed = closeOf(near)
    t.broker.handle(far)
    // The fixed header of a CONNECT announcing 1 MB; only its first bytes ever follow.
    near.write(Buffer.from([0x10, ...varint(1_000_000)]))
    near.write(Buffer.alloc(1024, 0x41))
    await within(closed, "the connection to close on the announced length")
    const logged = linesSince(before, /mqtt connection of .* closed/)
    expect(logged.map((l) => l.message)).toEqual([
      `mqtt connection of client (connecting) from memory closed: packet of 1000000 bytes exceeds the limit of ${MAX_PACKET_BYTES_UNAUTHENTICATED} bytes`
    ])
    // A CONNECT arriving whole in one read is measured too, and its credential never tried.
    const whole = duplexPair()
    const wholeClosed = closeOf(whole[0])
    t.broker.handle(whole[1])
    whole[0].write(connectPacket(BOOTSTRAP_KEY + "x".repeat(MAX_PACKET_BYTES_UNAUTHENTICATED)))
    await within(wholeClosed, "the oversized CONNECT to close")
    expect(linesSince(before, /exceeds the limit/)).toHaveLength(2)
    expect(linesSince(before, /connect refused/)).toHaveLength(0)
    // Everyone else is served.
    await subscribe(app, `devices/${s.device.id}/events/+`)
    const sentinel = nextMessage(app, (topic) => topic.endsWith("/after-oversize"))
    await app.publishAsync(`devices/${s.device.id}/events/after-oversize`, "1", { qos: 1 })
    await sentinel
  })

  it("closes an authenticated connection sending a packet over 512 KiB and stores nothing; a smaller one over the data limit is only refused", async () => {
    const device = await asDevice()
    const before = t.logs.length
    // Over the event data limit (256 KiB) but within the packet limit: refused, still connected.
    await device.publishAsync("events", JSON.stringify({ name: "big", data: "x".repeat(300 * 1024) }), { qos: 1 })
    expect(device.connected).toBe(true)
    expect(linesSince(before, /mqtt publish on events .* refused \(0x95\)/)).toHaveLength(1)
    const gone = closedBy(device)
    device.publish("events", JSON.stringify({ name: "huge", data: "x".repeat(MAX_PACKET_BYTES) }), { qos: 1 })
    await gone
    expect(linesSince(before, new RegExp(`closed: packet of \\d+ bytes exceeds the limit of ${MAX_PACKET_BYTES} bytes`))).toHaveLength(1)
    expect(await events("big")).toBe(0)
    expect(await events("huge")).toBe(0)
  })

  it("closes a connection whose topic is ill-formed UTF-8, logging it once and refusing nothing else", async () => {
    const before = t.logs.length
    const [near, far] = duplexPair()
    const closed = closeOf(near)
    t.broker.handle(far)
    const connack = firstBytes(near, 4)
    near.write(connectPacket(s.device.key, "utf8"))
    expect([...(await within(connack, "CONNACK"))]).toEqual([0x20, 2, 0, 0])
    near.write(publishPacket(Buffer.concat([Buffer.from("devices/"), Buffer.from([0xc3, 0x28]), Buffer.from("/events/bad")]), Buffer.from("1")))
    await within(closed, "the connection to close on ill-formed UTF-8")
    expect(linesSince(before, /./).map((l) => l.message)).toEqual([
      expect.stringMatching(/^mqtt connection of client utf8 from memory closed: topic is not well-formed UTF-8$/)
    ])
  })

  it("ties a client id to the credential holding it: another credential cannot take it over or receive its queue", async () => {
    const clientId = "shared-session"
    const owner = await t.connectInMemory({ username: BOOTSTRAP_KEY, clientId, clean: false })
    expect(await subscribe(owner, `devices/${s.device.id}/events/+`)).toEqual([1])
    await owner.endAsync()
    const device = await asDevice()
    await device.publishAsync(`devices/${s.device.id}/events/while-away`, "1", { qos: 1 })
    const before = t.logs.length
    await expect(t.connectInMemory({ username: s.tenant.appKey, clientId, clean: false })).rejects.toThrow(/Identifier rejected/)
    await expect(t.connectInMemory({ username: s.device.key, clientId, clean: false })).rejects.toThrow(/Identifier rejected/)
    expect(linesSince(before, /client id belongs to another credential's session/)).toHaveLength(2)
    // The owner's queue waited for the owner.
    const back = await t.connectInMemory({ username: BOOTSTRAP_KEY, clientId, clean: false })
    const queued = await nextMessage(back, (topic) => topic.endsWith("/while-away"), "the queued event")
    expect(queued.json).toMatchObject({ name: "while-away", device: { id: s.device.id } })
    // While it is connected another credential cannot close it by taking the id.
    await expect(t.connectInMemory({ username: s.tenant.appKey, clientId, clean: true })).rejects.toThrow(/Identifier rejected/)
    expect(back.connected).toBe(true)
    // The same credential may (a reconnect after a half-open connection).
    const replaced = closedBy(back)
    const again = await t.connectInMemory({ username: BOOTSTRAP_KEY, clientId, clean: true })
    await replaced
    await Promise.all([again.endAsync(), device.endAsync()])
    // A clean session ending frees the id.
    const tenant = await t.connectInMemory({ username: s.tenant.appKey, clientId })
    await tenant.endAsync()
  })

  it(`keeps at most ${MAX_QUEUED_PER_CLIENT} deliveries for a session that is away, and says so once`, async () => {
    const clientId = "away-session"
    const away = await t.connectInMemory({ username: BOOTSTRAP_KEY, clientId, clean: false })
    await subscribe(away, `devices/${s.device.id}/events/+`)
    await away.endAsync()
    const watcher = await t.connectInMemory({ username: BOOTSTRAP_KEY })
    await subscribe(watcher, `devices/${s.device.id}/events/+`)
    const before = t.logs.length
    const device = await asDevice()
    const total = MAX_QUEUED_PER_CLIENT + 5
    // 20 s for 1,005 events stored, queued for the away session and delivered live (the bound was
    // meant to be 20 s before too, but nextMessage's own 5 s ran out first: seen on a slow machine in CI).
    const last = nextMessage(watcher, (topic) => topic.endsWith(`/q${total - 1}`), "the last event live", 20_000)
    for (let i = 0; i < total; i++) device.publish(`devices/${s.device.id}/events/q${i}`, "1", { qos: 0 })
    // Deliveries are queued for the absent session before they are sent live.
    await last
    expect(linesSince(before, new RegExp(`session ${clientId}: ${MAX_QUEUED_PER_CLIENT} deliveries queued while it is away`))).toHaveLength(1)
    const back = await t.connectInMemory({ username: BOOTSTRAP_KEY, clientId, clean: false, connectTimeout: 20_000 })
    const received = collect(back)
    await within(new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (received.length >= MAX_QUEUED_PER_CLIENT) resolve(clearInterval(poll))
      }, 20)
    }), "the queued events", 20_000)
    // Nothing beyond the bound follows.
    const sentinel = nextMessage(back, (topic) => topic.endsWith("/after-queue"))
    await device.publishAsync(`devices/${s.device.id}/events/after-queue`, "1", { qos: 1 })
    await sentinel
    const names = received.map((m) => m.json.name)
    expect(names.slice(0, MAX_QUEUED_PER_CLIENT)).toEqual(Array.from({ length: MAX_QUEUED_PER_CLIENT }, (_, i) => `q${i}`))
    expect(names.slice(MAX_QUEUED_PER_CLIENT)).toEqual(["after-queue"])
    await Promise.all([back.endAsync(), watcher.endAsync(), device.endAsync()])
  }, 60_000)

  it(`closes a connected client that leaves ${MAX_QUEUED_PER_CLIENT} deliveries unacknowledged`, async () => {
    const lazy = await t.connectInMemory({ username: BOOTSTRAP_KEY, clientId: "never-acks", clean: false })
    await subscribe(lazy, `devices/${s.device.id}/events/+`)
    // mqtt.js sends the PUBACK once this calls back; it never does.
    lazy.handleMessage = () => {}
    const before = t.logs.length
    const gone = closedBy(lazy, 20_000)
    const device = await asDevice()
    for (let i = 0; i < MAX_QUEUED_PER_CLIENT + 1; i++) device.publish(`devices/${s.device.id}/events/unacked`, "1", { qos: 0 })
    await gone
    expect(linesSince(before, new RegExp(`client never-acks from memory closed: ${MAX_QUEUED_PER_CLIENT} deliveries left unacknowledged`))).toHaveLength(1)
    await device.endAsync()
  }, 60_000)

  it("keeps what a peer chose (client id, topic) to one log line", async () => {
    const before = t.logs.length
    // U+2028 and U+2029 end a line for Node's readline, as a newline does.
    const device = await t.connectInMemory({ username: s.device.key, clientId: "evil\nWARN forged\u2028ERROR forged" })
    await device.publishAsync("devices/x\ny\u2029w/events/z", "1", { qos: 1 })
    const lines = linesSince(before, /mqtt publish on/).map((l) => l.message)
    expect(lines).toEqual([
      expect.stringContaining("on devices/x\\u000ay\\u2029w/events/z from client evil\\u000aWARN forged\\u2028ERROR forged from memory refused")
    ])
    expect(lines[0]).not.toMatch(/[\n\u2028\u2029]/)
    await device.endAsync()
  })

  it(`forgives refusals older than a minute: only ${MAX_REFUSALS} within 60 s disconnect`, async () => {
    vi.useFakeTimers({ toFake: ["Date"] })
    const device = await asDevice()
    const spoof = () => device.publishAsync(`devices/${s.other.id}/events/spoof`, "1", { qos: 1 })
    for (let i = 0; i < MAX_REFUSALS - 1; i++) await spoof()
    vi.setSystemTime(Date.now() + 61_000)
    for (let i = 0; i < MAX_REFUSALS - 1; i++) await spoof()
    expect(device.connected).toBe(true)
    const gone = closedBy(device)
    device.publish(`devices/${s.other.id}/events/spoof`, "1", { qos: 1 })
    await gone
  })
})

describe("MQTT limits over sockets", () => {
  let t: MqttTestApp
  beforeAll(async () => {
    t = await startMqttApp("pglite", { listen: true })
  })
  afterAll(() => t?.close())

  it("closes a TCP connection announcing an oversized packet and names its address in the log", async () => {
    const port = t.server?.port ?? 0
    const before = t.logs.length
    const socket = net.connect(port, "127.0.0.1")
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()))
    const local = `${socket.localAddress}:${socket.localPort}`
    const closed = closeOf(socket)
    socket.write(Buffer.from([0x10, ...varint(10_000_000)]))
    socket.write(Buffer.alloc(8 * 1024, 0x41))
    await within(closed, "the TCP connection to close")
    expect(t.logs.slice(before).map((l) => l.message)).toContain(
      `mqtt connection of client (connecting) from ${local} closed: packet of 10000000 bytes exceeds the limit of ${MAX_PACKET_BYTES_UNAUTHENTICATED} bytes`
    )
  })

  it("refuses a WebSocket message larger than the largest packet", async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${t.server?.wsPort ?? 0}`, "mqtt")
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve())
      ws.once("error", reject)
    })
    const code = new Promise<number>((resolve) => ws.once("close", (c: number) => resolve(c)))
    ws.send(Buffer.alloc(MAX_PACKET_BYTES + 1024, 0x41))
    // 1009: message too big.
    expect(await within(code, "the WebSocket to close")).toBe(1009)
  })
})
