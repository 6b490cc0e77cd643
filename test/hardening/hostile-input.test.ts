import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { type CoapTestApp, coapAgent, coapCall, startCoapApp } from "../support/coap.ts"
import { STORE_KINDS } from "../support/databases.ts"
import { closedBy, type MqttTestApp, seed, type Seeded, startMqttApp } from "../support/mqtt.ts"

/**
 * Issue 15, failures 1 and 4: inputs that crashed the process or were answered as server errors
 * are refused as the client's fault on every protocol, and change nothing.
 */

const deepArray = (levels: number) => `${"[".repeat(levels)}${"]".repeat(levels)}`
/** About 9 KB: the publish that ended the process. */
const CRASHER = deepArray(4_500)

const RESERVED = "is a reserved key (__proto__, constructor and prototype are refused)"

describe.each(STORE_KINDS)("hostile input on %s", (kind) => {
  let t: MqttTestApp
  let s: Seeded
  beforeAll(async () => {
    t = await startMqttApp(kind)
    s = await seed(t)
  })
  afterAll(() => t?.close())

  const eventCount = async () => {
    const res = await t.call("GET", `/events?device.id=${s.device.id}&limit=1`)
    expect(res.status).toBe(200)
    return res.body.count as number
  }
  const deviceCount = async () => Number((await t.call("GET", "/devices?limit=1")).headers.get("x-total-count"))

  /** A raw request body, so that what JSON.stringify would never write can be sent. */
  const raw = async (method: string, path: string, body: string, contentType = "application/json") => {
    const res = await t.app.request(`/v1${path}`, { method, body, headers: { "content-type": contentType, authorization: `Bearer ${BOOTSTRAP_KEY}` } })
    return { status: res.status, body: await res.json() }
  }

  const refusedCases: ReadonlyArray<{ what: string; method?: string; path?: string; body: () => string; field: string; rule: string }> = [
    { what: "deeply nested event data", body: () => `{"name":"deep","device":{"id":"${s.device.id}"},"data":${CRASHER}}`, field: "body", rule: "must be at most 64 levels deep" },
    { what: "NUL in an event name", body: () => `{"name":"a\\u0000b","device":{"id":"${s.device.id}"}}`, field: "name", rule: "must not contain NUL characters" },
    { what: "NUL in event data", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":{"v":"\\u0000"}}`, field: "data.v", rule: "must not contain NUL characters" },
    { what: "NUL in a data key", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":{"\\u0000":1}}`, field: "data.\u0000", rule: "key must not contain NUL characters" },
    { what: "NUL in a customId", body: () => `{"name":"n","device":{"customId":"new\\u0000device"}}`, field: "device.customId", rule: "must not contain NUL characters" },
    { what: "a lone surrogate", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":"\\udc00"}`, field: "data", rule: "must be valid Unicode (no lone surrogates)" },
    { what: "1e400", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":1e400}`, field: "data", rule: "must be a finite number" },
    { what: "a 400-digit integer", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":{"v":${"7".repeat(400)}}}`, field: "data.v", rule: "must be a finite number" },
    { what: "a __proto__ key", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":{"__proto__":{"x":1}}}`, field: "data.__proto__", rule: RESERVED },
    { what: "a constructor key", body: () => `{"name":"n","device":{"id":"${s.device.id}"},"data":{"constructor":1}}`, field: "data.constructor", rule: RESERVED },
    { what: "a dotted prototype key", body: () => `{"name":"n","device.id":"${s.device.id}","data.prototype":1}`, field: "data.prototype", rule: RESERVED },
    { what: "deep command-run data", path: "/commands/run", body: () => `{"slug":"reboot","device":{"id":"${s.device.id}"},"data":${CRASHER}}`, field: "body", rule: "must be at most 64 levels deep" },
    { what: "a NUL in a command slug", path: "/commands", body: () => `{"name":"Reboot","slug":"re\\u0000boot","device":{"id":"${s.device.id}"}}`, field: "slug", rule: "must not contain NUL characters" },
    { what: "a deep device update", method: "PUT", path: "/devices/DEVICE", body: () => `{"name":"renamed","customId":${CRASHER}}`, field: "body", rule: "must be at most 64 levels deep" }
  ]

  for (const c of refusedCases) {
    it(`REST refuses ${c.what} with a 400 naming ${c.field}, and stores nothing`, async () => {
      const [events, devices] = [await eventCount(), await deviceCount()]
      const res = await raw(c.method ?? "POST", (c.path ?? "/events").replace("DEVICE", s.device.id), c.body())
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({ status: 400, code: "invalid_request", field: c.field, message: `${c.field}: ${c.rule}` })
      expect([await eventCount(), await deviceCount()]).toEqual([events, devices])
      expect((await t.call("GET", `/devices/${s.device.id}`)).body.name).toBe("Meter")
    })
  }

  it("REST refuses reserved and NUL keys in form-encoded bodies the same way", async () => {
    const proto = await raw("POST", "/events", `name=n&device.id=${s.device.id}&device.__proto__=x`, "application/x-www-form-urlencoded")
    expect(proto.status).toBe(400)
    expect(proto.body.error.message).toBe(`device.__proto__: ${RESERVED}`)
    const nul = await raw("POST", "/events", `name=n%00&device.id=${s.device.id}`, "application/x-www-form-urlencoded")
    expect(nul.body.error.message).toBe("name: must not contain NUL characters")
    const deepData = await raw("POST", "/events", `name=n&device.id=${s.device.id}&data=${encodeURIComponent(CRASHER)}`, "application/x-www-form-urlencoded")
    expect(deepData.body.error.message).toBe("data: must be at most 64 levels deep")
    expect(await eventCount()).toBe(0)
  })

  it("REST refuses NUL in query strings and path parameters with a 400 naming them", async () => {
    const query = await t.call("GET", "/devices?order=%00")
    expect(query.status).toBe(400)
    expect(query.body.error.message).toBe("order: must not contain NUL characters")
    const path = await t.call("GET", "/devices/dev_%00")
    expect(path.status).toBe(400)
    expect(path.body.error.message).toBe("id: must not contain NUL characters")
  })

  it("REST still takes data the policy allows, unchanged", async () => {
    const data = { nested: JSON.parse(deepArray(62)), text: "⚡ ok", proto: 1, big: 1.5e300 }
    const res = await t.call("POST", "/events", { body: { name: "fine", device: { id: s.device.id }, data } })
    expect(res.status).toBe(200)
    const stored = await t.call("GET", `/events/${res.body.id}`)
    expect(stored.body.data).toEqual(data)
  })

  it("MQTT acknowledges and drops a refused publish on every topic, stores nothing, and closes on the third", async () => {
    const before = await eventCount()
    const client = await t.connectInMemory({ username: s.device.key, password: " " })
    // PUBACK comes for each: MQTT 3.1.1 cannot refuse a PUBLISH [MQTT-3.3.5-2]. The command topic hung before.
    await client.publishAsync(`devices/${s.device.id}/events/deep`, CRASHER, { qos: 1 })
    await client.publishAsync(`devices/${s.device.id}/events/nul`, JSON.stringify({ data: { __proto__: null, constructor: 1 } }), { qos: 1 })
    const closed = closedBy(client)
    void client.publishAsync(`devices/${s.device.id}/commands/reboot`, CRASHER, { qos: 1 }).catch(() => {})
    await closed
    expect(await eventCount()).toBe(before)
    const refusals = t.logs.filter((l) => l.message.includes("refused (0x99)"))
    expect(refusals.map((l) => l.message).join("\n")).toMatch(/must be at most 64 levels deep[\s\S]*reserved key[\s\S]*disconnecting after 3 refusals/)
    expect(t.logs.filter((l) => l.level === "Error")).toEqual([])
  })

  it("MQTT closes a connection sending NUL in a topic [MQTT-1.5.3-2], refuses non-finite numbers, and still stores a good publish", async () => {
    const before = await eventCount()
    const nul = await t.connectInMemory({ username: BOOTSTRAP_KEY, password: " " })
    const closed = closedBy(nul)
    void nul.publishAsync(`devices/${s.device.id}/events/a\u0000b`, "1", { qos: 1 }).catch(() => {})
    await closed
    const app = await t.connectInMemory({ username: BOOTSTRAP_KEY, password: " " })
    await app.publishAsync(`devices/${s.device.id}/events/big`, `{"data":${"9".repeat(400)}}`, { qos: 1 })
    expect(await eventCount()).toBe(before)
    await app.publishAsync(`devices/${s.device.id}/events/fine`, JSON.stringify({ data: { v: 1 } }), { qos: 1 })
    expect(await eventCount()).toBe(before + 1)
    const lines = t.logs.map((l) => l.message).join("\n")
    expect(lines).toMatch(/closed: topic is not well-formed UTF-8/)
    expect(lines).toMatch(/data: must be a finite number/)
    await app.endAsync()
  })
  it("answers an event for a device deleted behind the caches (another process) as unknown, not as a store failure", async () => {
    const space = await t.call("POST", "/spaces", { body: { name: "Doomed" } })
    const doomed = (await t.call("POST", "/devices", { body: { name: "Doomed", space: { id: space.body.id } } })).body
    // Known to this process's caches, then deleted where they cannot see it.
    expect((await t.call("POST", "/events", { body: { name: "first", device: { id: doomed.id } } })).status).toBe(200)
    const client = await t.connectInMemory({ username: BOOTSTRAP_KEY, password: " " })
    await client.publishAsync(`devices/${doomed.id}/events/first`, "1", { qos: 1 })
    await Effect.runPromise(t.sql.query("DELETE FROM devices WHERE id = $1", [doomed.id]))
    const rest = await t.call("POST", "/events", { body: { name: "late", device: { id: doomed.id } } })
    expect(rest.status).toBe(404)
    expect(rest.body.error.code).toBe("not_found")
    // MQTT: acknowledged and dropped as a refusal, the connection kept.
    await client.publishAsync(`devices/${doomed.id}/events/late`, "2", { qos: 1 })
    expect(client.connected).toBe(true)
    expect(t.logs.map((l) => l.message).join("\n")).toMatch(new RegExp(`publish on devices/${doomed.id}/events/late .* refused \\(0x\\w+\\): device ${doomed.id} not found`))
    expect(t.logs.filter((l) => l.level === "Error")).toEqual([])
    await client.endAsync()
  })
})

describe("hostile input over CoAP", () => {
  let t: CoapTestApp
  let device: { id: string; secretKey: string }
  const agent = coapAgent()
  beforeAll(async () => {
    t = await startCoapApp()
    const space = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "S" } })
    device = (await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "D", space: { id: space.body.id } } })).body
  })
  afterAll(async () => {
    agent.close()
    await t?.close()
  })

  it("answers 4.00 naming the field to every breach of the policy, and stores nothing", async () => {
    const key = () => device.secretKey
    const cases: ReadonlyArray<[string, string]> = [
      [`{"accessToken":"${key()}","name":"deep","data":${deepArray(3_000)}}`, "body: must be at most 64 levels deep"],
      [`{"accessToken":"${key()}","name":"a\\u0000b"}`, "name: must not contain NUL characters"],
      [`{"accessToken":"${key()}","name":"n","data":"\\ud800"}`, "data: must be valid Unicode (no lone surrogates)"],
      [`{"accessToken":"${key()}","name":"n","data":1e400}`, "data: must be a finite number"],
      [`{"accessToken":"${key()}","name":"n","data":{"__proto__":1}}`, `data.__proto__: ${RESERVED}`]
    ]
    for (const [payload, message] of cases) {
      const answer = await coapCall(agent, t.coapPort, { path: "/events", payload, blockwise: payload.length > 1000 })
      expect(answer.code).toBe("4.00")
      expect(answer.body.error.message).toBe(message)
    }
    const stored = await t.call("GET", `/events?device.id=${device.id}`, { key: BOOTSTRAP_KEY })
    expect(stored.body.count).toBe(0)
  })
})
