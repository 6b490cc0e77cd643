import type { MqttClient } from "mqtt"
import mqttPacket, { type Packet } from "mqtt-packet"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_REFUSALS } from "../../src/adapters/mqtt/MqttBroker.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"
import { eventually } from "../support/eventually.ts"
import {
  closedBy,
  collect,
  duplexPair,
  type MqttTestApp,
  nextMessage,
  seed,
  type Seeded,
  startMqttApp,
  subscribe,
  within
} from "../support/mqtt.ts"

/** The MQTT protocol over aedes `handle()` on in-memory streams: no sockets. */
describe.each(STORE_KINDS)("MQTT broker in memory on %s", (kind) => {
  let t: MqttTestApp
  let s: Seeded
  let app: MqttClient
  beforeAll(async () => {
    t = await startMqttApp(kind)
    s = await seed(t)
    app = await t.connectInMemory({ username: BOOTSTRAP_KEY })
  })
  afterAll(() => t?.close())

  const asDevice = (key = s.device.key) => t.connectInMemory({ username: key, password: " " })
  const events = async (deviceId: string, name: string) => (await t.call("GET", `/events?device.id=${deviceId}&name=${name}&limit=200`)).body
  const refusals = () => t.logs.filter((l) => /mqtt publish on .* refused/.test(l.message))

  it("acknowledges a QoS 1 event only once stored and delivers the stored Event, not the raw packet", async () => {
    expect(await subscribe(app, `devices/${s.device.id}/events/+`)).toEqual([1])
    const device = await asDevice()
    const received = collect(app)
    const first = nextMessage(app, (topic) => topic === `devices/${s.device.id}/events/temperature`)
    await device.publishAsync(`devices/${s.device.id}/events/temperature`, JSON.stringify({ data: { celsius: 21.5 }, timestamp: 1_700_000_000_000 }), {
      qos: 1
    })
    // The PUBACK came back: the row is committed.
    const stored = await events(s.device.id, "temperature")
    expect(stored.count).toBe(1)
    expect(stored.events[0]).toMatchObject({ name: "temperature", data: { celsius: 21.5 }, timestamp: 1_700_000_000_000, device: { id: s.device.id } })
    const message = await first
    expect(message.json).toEqual(stored.events[0])
    expect(Object.keys(message.json).sort()).toEqual(["data", "device", "id", "name", "timestamp"])
    // A second publish is delivered after anything the first could have caused: only stored Events arrive.
    const sentinel = nextMessage(app, (topic) => topic.endsWith("/sentinel"))
    await device.publishAsync(`devices/${s.device.id}/events/sentinel`, "1", { qos: 1 })
    await sentinel
    expect(received.map((m) => m.topic)).toEqual([`devices/${s.device.id}/events/temperature`, `devices/${s.device.id}/events/sentinel`])
    expect(received.every((m) => typeof m.json.id === "string" && m.json.id.startsWith("evt_"))).toBe(true)
    await device.endAsync()
  })

  it("takes any other JSON value as the data, at QoS 0 and on the short topic", async () => {
    await subscribe(app, `devices/${s.device.id}/events/+`)
    const device = await asDevice()
    const plain = nextMessage(app, (topic) => topic.endsWith("/events/power"))
    await device.publishAsync(`devices/${s.device.id}/events/power`, "42", { qos: 0 })
    expect((await plain).json).toMatchObject({ name: "power", data: 42, device: { id: s.device.id } })
    // An object that is not {"data", "timestamp"?} is the data itself.
    const object = nextMessage(app, (topic) => topic.endsWith("/events/power"))
    await device.publishAsync(`devices/${s.device.id}/events/power`, JSON.stringify({ data: 1, unit: "W" }), { qos: 0 })
    expect((await object).json.data).toEqual({ data: 1, unit: "W" })
    const short = nextMessage(app, (topic) => topic.endsWith("/events/door"))
    await device.publishAsync("events", JSON.stringify({ name: "door", data: "open", timestamp: "2024-01-02T03:04:05Z" }), { qos: 1 })
    expect((await short).json).toMatchObject({ name: "door", data: "open", timestamp: Date.parse("2024-01-02T03:04:05Z") })
    expect((await events(s.device.id, "power")).count).toBe(2)
    expect((await events(s.device.id, "door")).events[0].data).toBe("open")
    await device.endAsync()
  })

  it("stores locations and delivers the stored Location", async () => {
    expect(await subscribe(app, `devices/${s.device.id}/locations`)).toEqual([1])
    const device = await asDevice()
    const first = nextMessage(app, (topic) => topic === `devices/${s.device.id}/locations`)
    await device.publishAsync(`devices/${s.device.id}/locations`, JSON.stringify({ latitude: "53.3498", longitude: -6.2603, altitude: 12 }), { qos: 1 })
    const message = await first
    expect(message.json).toMatchObject({ latitude: "53.3498", longitude: "-6.2603", altitude: "12", device: { id: s.device.id } })
    expect((await t.call("GET", `/locations/${message.json.id}`)).body).toEqual(message.json)
    const second = nextMessage(app, (topic) => topic === `devices/${s.device.id}/locations`)
    await device.publishAsync("locations", JSON.stringify({ latitude: 1, longitude: 2 }), { qos: 1 })
    expect((await second).json).toMatchObject({ latitude: "1", longitude: "2", altitude: null })
    await device.endAsync()
  })

  it("delivers command runs to the device, run over REST or by an application over MQTT", async () => {
    const command = await t.call("POST", "/commands", { body: { name: "Reboot", device: { id: s.device.id } } })
    expect(command.status).toBe(200)
    const device = await asDevice()
    expect(await subscribe(device, `devices/${s.device.id}/commands/reboot/run`)).toEqual([1])
    const overRest = nextMessage(device)
    const run = await t.call("POST", "/commands/run", { body: { slug: "reboot", device: { id: s.device.id }, data: { delay: 5 } } })
    expect(run.status).toBe(200)
    const delivered = await overRest
    expect(delivered.topic).toBe(`devices/${s.device.id}/commands/reboot/run`)
    expect(delivered.json).toEqual({ id: run.body.id, slug: "reboot", data: { delay: 5 }, device: { id: s.device.id }, timestamp: run.body.timestamp })
    const byTopic = nextMessage(device)
    await app.publishAsync(`devices/${s.device.id}/commands/reboot`, JSON.stringify({ data: { delay: 1 } }), { qos: 1 })
    expect((await byTopic).json).toMatchObject({ slug: "reboot", data: { delay: 1 } })
    const byShortTopic = nextMessage(device)
    await app.publishAsync("commands", JSON.stringify({ slug: "reboot", device: { id: s.device.id }, data: "now" }), { qos: 1 })
    expect((await byShortTopic).json).toMatchObject({ slug: "reboot", data: "now" })
    await device.endAsync()
  })

  it("refuses what a credential may not publish, stores nothing, and disconnects after repeated refusals", async () => {
    expect(await subscribe(app, `devices/${s.other.id}/events/+`)).toEqual([1])
    const received = collect(app)
    const before = refusals().length
    const device = await asDevice()
    // Another device's topic, then bytes that are not JSON, then an unknown topic.
    await device.publishAsync(`devices/${s.other.id}/events/spoof`, JSON.stringify({ data: 1 }), { qos: 1 })
    await device.publishAsync(`devices/${s.device.id}/events/garbled`, Buffer.from([0xff, 0x00, 0x7b]), { qos: 1 })
    expect(device.connected).toBe(true)
    const gone = closedBy(device)
    device.publish("devices/nowhere", "{}", { qos: 1 })
    await gone
    expect(refusals().length - before).toBe(MAX_REFUSALS)
    expect(refusals().slice(-1)[0].message).toMatch(/disconnecting after 3 refusals/)
    expect((await events(s.other.id, "spoof")).count).toBe(0)
    expect((await events(s.device.id, "garbled")).count).toBe(0)
    // A device key may not run commands, and an application needs a device it owns.
    const again = await asDevice()
    await again.publishAsync(`devices/${s.device.id}/commands/reboot`, "{}", { qos: 1 })
    await again.endAsync()
    await app.publishAsync(`devices/${s.tenant.deviceId}/events/spoof`, "1", { qos: 1 })
    expect((await t.call("GET", `/events?device.id=${s.tenant.deviceId}`, { key: s.tenant.appKey })).body.count).toBe(0)
    // Nothing reached the subscriber: a later delivery on the same subscription comes first.
    const sentinel = nextMessage(app, (topic) => topic.startsWith(`devices/${s.other.id}/`))
    await app.publishAsync(`devices/${s.other.id}/events/sentinel`, "1", { qos: 1 })
    await sentinel
    expect(received.filter((m) => m.topic.startsWith(`devices/${s.other.id}/`)).map((m) => m.json.name)).toEqual(["sentinel"])
  })

  it("grants subscriptions only to a credential's own devices", async () => {
    const device = await asDevice()
    const filters = [
      `devices/${s.device.id}/events/+`,
      `devices/${s.device.id}/commands/+/run`,
      `devices/${s.other.id}/events/+`,
      "devices/+/events/+",
      "#",
      "$voltaic/ingested",
      "$SYS/#"
    ]
    expect(await subscribe(device, filters)).toEqual([1, 1, 128, 128, 128, 128, 128])
    expect(await subscribe(device, `devices/${s.device.id}/events/temperature`, 0)).toEqual([0])
    const tenant = await t.connectInMemory({ username: s.tenant.appKey })
    expect(await subscribe(tenant, [`devices/${s.device.id}/events/+`, `devices/${s.tenant.deviceId}/events/+`, "devices/dev_unknown/locations"])).toEqual([
      128,
      1,
      128
    ])
    // Unsubscribing from a filter never subscribed is fine.
    await within(tenant.unsubscribeAsync("devices/never/events/+"), "UNSUBACK")
    await Promise.all([device.endAsync(), tenant.endAsync()])
  })

  it("refuses a subscription to a deleted device's topics, as to an id never seen", async () => {
    const space = (await t.call("POST", "/spaces", { body: { name: "Doomed" } })).body
    const doomed = (await t.call("POST", "/devices", { body: { name: "Doomed", space: { id: space.id } } })).body
    expect(await subscribe(app, `devices/${doomed.id}/events/+`)).toEqual([1])
    expect((await t.call("DELETE", `/devices/${doomed.id}`)).status).toBe(200)
    const later = await t.connectInMemory({ username: BOOTSTRAP_KEY })
    // As a revoked credential's sessions close: once the credential change is applied (here in
    // this process's next turns, after it reads the store's change counter), not before DELETE answers.
    const granted = await eventually(async () => {
      const codes = await subscribe(later, [`devices/${doomed.id}/events/+`, `devices/${s.device.id}/events/+`])
      return codes[0] === 128 ? codes : undefined
    }, 5_000, "the deleted device's topic refused")
    expect(granted.value).toEqual([128, 1])
    await later.endAsync()
  })

  it("never keeps a retained publish", async () => {
    const device = await asDevice()
    await device.publishAsync(`devices/${s.device.id}/events/retained`, "1", { qos: 1, retain: true })
    const late = await t.connectInMemory({ username: BOOTSTRAP_KEY })
    const received = collect(late)
    await subscribe(late, `devices/${s.device.id}/events/+`)
    const sentinel = nextMessage(late)
    await device.publishAsync(`devices/${s.device.id}/events/after`, "2", { qos: 1 })
    await sentinel
    expect(received.map((m) => m.json.name)).toEqual(["after"])
    await Promise.all([device.endAsync(), late.endAsync()])
  })

  it("takes QoS 2 as 1, and allows empty client ids and several sessions with one credential", async () => {
    const one = await t.connectInMemory({ username: s.device.key, clientId: "" })
    const two = await t.connectInMemory({ username: s.device.key, clientId: "" })
    // The SUBACK grants what deliveries will be: QoS 1, never 2.
    expect(await subscribe(one, `devices/${s.device.id}/events/+`, 2)).toEqual([1])
    await subscribe(two, `devices/${s.device.id}/events/+`)
    const both = Promise.all([nextMessage(one), nextMessage(two)])
    await one.publishAsync(`devices/${s.device.id}/events/qos2`, JSON.stringify({ data: "x" }), { qos: 2 })
    const [a, b] = await both
    expect(a.json).toEqual(b.json)
    expect([a.qos, b.qos]).toEqual([1, 1])
    expect((await events(s.device.id, "qos2")).count).toBe(1)
    await Promise.all([one.endAsync(), two.endAsync()])
  })

  it("stores a QoS 2 publish sent again before its PUBREL once, alone or in the same read as the first", async () => {
    const [near, far] = duplexPair()
    t.broker.handle(far)
    const parser = mqttPacket.parser({ protocolVersion: 4 })
    const answers: Array<Packet> = []
    parser.on("packet", (packet) => answers.push(packet))
    near.on("data", (chunk: Buffer) => parser.parse(chunk))
    const bytes = (packet: Packet) => mqttPacket.generate(packet)
    const answered = (what: string, done: () => boolean) =>
      within(new Promise<void>((resolve) => {
        const check = () => (done() ? resolve() : setTimeout(check, 5))
        check()
      }), what)
    const count = (cmd: string, messageId: number) => answers.filter((a) => a.cmd === cmd && "messageId" in a && a.messageId === messageId).length
    near.write(bytes({ cmd: "connect", protocolId: "MQTT", protocolVersion: 4, clean: true, clientId: "", keepalive: 60, username: s.device.key, password: Buffer.from(" ") }))
    await answered("CONNACK", () => answers.some((a) => a.cmd === "connack"))
    const publish = (messageId: number, dup: boolean, name: string): Packet => ({
      cmd: "publish", qos: 2, dup, retain: false, messageId, topic: `devices/${s.device.id}/events/${name}`, payload: Buffer.from(JSON.stringify({ data: messageId }))
    })
    // Sent again after the first was answered with PUBREC.
    near.write(bytes(publish(999, false, "q2-again")))
    await answered("the first PUBREC", () => count("pubrec", 999) === 1)
    near.write(bytes(publish(999, true, "q2-again")))
    await answered("the second PUBREC", () => count("pubrec", 999) === 2)
    near.write(bytes({ cmd: "pubrel", messageId: 999 }))
    await answered("PUBCOMP", () => count("pubcomp", 999) === 1)
    // Both in one read, the second before the first is stored.
    near.write(Buffer.concat([bytes(publish(1000, false, "q2-together")), bytes(publish(1000, true, "q2-together"))]))
    await answered("both PUBRECs", () => count("pubrec", 1000) === 2)
    near.write(bytes({ cmd: "pubrel", messageId: 1000 }))
    await answered("PUBCOMP", () => count("pubcomp", 1000) === 1)
    expect((await events(s.device.id, "q2-again")).count).toBe(1)
    expect((await events(s.device.id, "q2-together")).count).toBe(1)
    // The id is free again after PUBCOMP: a new message under it is a new event.
    near.write(bytes(publish(999, false, "q2-again")))
    await answered("a third PUBREC", () => count("pubrec", 999) === 3)
    expect((await events(s.device.id, "q2-again")).count).toBe(2)
    near.destroy()
  })

  it("stores a device's will as its event when the connection drops, but not after its key is rotated", async () => {
    const will = { topic: `devices/${s.device.id}/events/offline`, payload: Buffer.from('{"data":true}'), qos: 1 as const, retain: false }
    await subscribe(app, `devices/${s.device.id}/events/+`)
    const device = await t.connectInMemory({ username: s.device.key, will })
    const received = nextMessage(app, (topic) => topic.endsWith("/events/offline"))
    device.stream.destroy()
    expect((await received).json).toMatchObject({ name: "offline", data: true, device: { id: s.device.id } })
    expect((await events(s.device.id, "offline")).count).toBe(1)
    const rotatedDevice = await t.call("POST", "/devices", { body: { name: "Rotated", space: { id: s.spaceId } } })
    const revoked = await t.connectInMemory({ username: rotatedDevice.body.secretKey, will: { ...will, topic: "events", payload: Buffer.from('{"name":"offline"}') } })
    const gone = closedBy(revoked, 1_000)
    expect((await t.call("POST", `/devices/${rotatedDevice.body.id}/secretKey`)).status).toBe(200)
    await gone
    const sentinel = nextMessage(app, (topic) => topic.endsWith("/events/after-will"))
    await app.publishAsync(`devices/${s.device.id}/events/after-will`, "1", { qos: 1 })
    await sentinel
    expect((await events(rotatedDevice.body.id, "offline")).count).toBe(0)
  })

  it("delivers to a device's watchers while any is connected, one closing or not, and to a new one after all closed", async () => {
    const deviceId = s.tenant.deviceId
    const topic = (name: string) => `devices/${deviceId}/events/${name}`
    const watcher = async () => {
      const client = await t.connectInMemory({ username: s.tenant.appKey })
      expect(await subscribe(client, topic("+"))).toEqual([1])
      return client
    }
    const publisher = await t.connectInMemory({ username: s.tenant.appKey })
    const publish = (name: string) => publisher.publishAsync(topic(name), "1", { qos: 1 })
    const [first, second] = [await watcher(), await watcher()]
    // The same device twice on one connection counts once: closing it below must not end the other's deliveries.
    expect(await subscribe(first, topic("both"))).toEqual([1])
    const both = Promise.all([nextMessage(first, (t) => t === topic("both")), nextMessage(second, (t) => t === topic("both"))])
    await publish("both")
    await both
    await first.endAsync()
    const stillWatched = nextMessage(second, (t) => t === topic("one"))
    await publish("one")
    expect((await stillWatched).json).toMatchObject({ name: "one", device: { id: deviceId } })
    await second.endAsync()
    // Nobody watches: stored all the same.
    await publish("none")
    expect((await t.call("GET", `/events?device.id=${deviceId}&name=none`, { key: s.tenant.appKey })).body.count).toBe(1)
    const third = await watcher()
    const received = collect(third)
    const again = nextMessage(third, (t) => t === topic("again"))
    await publish("again")
    await again
    expect(received.map((m) => m.json.name)).toEqual(["again"])
    await Promise.all([third.endAsync(), publisher.endAsync()])
  })

  it("refuses a connection without a known credential", async () => {
    await expect(t.connectInMemory({ username: "d_sk_unknown" })).rejects.toThrow(/Bad username or password/)
    await expect(t.connectInMemory({})).rejects.toThrow(/Bad username or password/)
  })

  it("closes the sessions of a rotated device key and a revoked token, and keeps the others", async () => {
    const device = await asDevice(s.other.key)
    const token = await t.call("POST", "/auth/token", { key: undefined, headers: { "x-app-key": BOOTSTRAP_KEY }, body: { username: ADMIN_EMAIL, password: ADMIN_PASSWORD } })
    expect(token.status).toBe(200)
    const user = await t.connectInMemory({ username: token.body.accessToken })
    expect(await subscribe(user, `devices/${s.device.id}/events/+`)).toEqual([1])
    const deviceGone = closedBy(device, 1_000)
    const rotated = await t.call("POST", `/devices/${s.other.id}/secretKey`)
    expect(rotated.status).toBe(200)
    await deviceGone
    expect(user.connected).toBe(true)
    const userGone = closedBy(user, 1_000)
    expect((await t.call("POST", "/auth/token/revoke", { key: undefined, body: { token: token.body.accessToken } })).status).toBe(200)
    await userGone
    expect(app.connected).toBe(true)
    const fresh = await asDevice(rotated.body.secretKey)
    await fresh.publishAsync("events", JSON.stringify({ name: "rotated", data: true }), { qos: 1 })
    expect((await events(s.other.id, "rotated")).count).toBe(1)
    await fresh.endAsync()
  })

  it("closes only the connection that sends garbage, and logs it once", async () => {
    const [near, far] = duplexPair()
    const closed = new Promise<void>((resolve) => near.once("close", () => resolve()))
    const before = t.logs.length
    t.broker.handle(far)
    near.write(Buffer.from([0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01]))
    await within(closed, "the garbage connection to close")
    const logged = t.logs.slice(before).filter((l) => /mqtt connection .* closed/.test(l.message))
    expect(logged).toHaveLength(1)
    await subscribe(app, `devices/${s.device.id}/events/+`)
    const sentinel = nextMessage(app, (topic) => topic.endsWith("/after-garbage"))
    await app.publishAsync(`devices/${s.device.id}/events/after-garbage`, "1", { qos: 1 })
    await sentinel
  })

  it("refuses MQTT 5 at CONNECT: aedes 1.x speaks MQTT 3.1 and 3.1.1 only", async () => {
    // When the broker learns MQTT 5, refusals should answer with `mqttRefusal` reason codes.
    await expect(t.connectInMemory({ username: BOOTSTRAP_KEY, protocolVersion: 5 })).rejects.toThrow(/Unacceptable protocol version/)
  })
})
