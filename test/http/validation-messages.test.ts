import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { handleCoap } from "../../src/adapters/coap/handler.ts"
import { decode } from "../../src/adapters/mqtt/publish.ts"
import { InvalidInput } from "../../src/domain/errors.ts"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"

/** Wording no refusal may carry: zod's own, which names no rule. */
const RAW_WORDING = /Invalid input|expected|Too (small|big)|Invalid option|Unrecognized key|Invalid (string|email|URL|discriminator)/

const LONG = "x".repeat(201)
const DEVICE = { id: "dev_nothere" }

interface Case {
  readonly body: Record<string, unknown>
  readonly field: string
  readonly message: string
}

/** Event payloads refused the same way over REST, MQTT and CoAP. */
const EVENT_CASES: ReadonlyArray<Case> = [
  { body: { data: 1 }, field: "name", message: "name: is required" },
  { body: { name: 42 }, field: "name", message: "name: must be a string" },
  { body: { name: null }, field: "name", message: "name: must be a string" },
  { body: { name: "" }, field: "name", message: "name: must not be empty" },
  { body: { name: LONG }, field: "name", message: "name: must be at most 200 characters" },
  { body: { name: "a/b" }, field: "name", message: "name: must not contain '/', '+' or '#' (it is an MQTT topic level)" },
  {
    body: { name: "t", timestamp: "yesterday" },
    field: "timestamp",
    message: "timestamp: must be epoch milliseconds or an ISO-8601 date-time, got \"yesterday\""
  },
  { body: { name: "t", timestamp: { at: 1 } }, field: "timestamp", message: "timestamp: must be epoch milliseconds or an ISO-8601 date-time, got {\"at\":1}" },
  { body: { name: "t", device: "dev_1" }, field: "device", message: "device: must be an object" },
  { body: { name: "t", device: { id: 7 } }, field: "device.id", message: "device.id: must be a string" },
  { body: { name: "t", device: { customId: "" } }, field: "device.customId", message: "device.customId: must not be empty" }
]

/** Location payloads refused the same way over REST, MQTT and CoAP. */
const LOCATION_CASES: ReadonlyArray<Case> = [
  { body: {}, field: "latitude", message: "latitude: is required" },
  { body: { latitude: 1 }, field: "longitude", message: "longitude: is required" },
  { body: { latitude: 1, longitude: {} }, field: "longitude", message: "longitude: must be a number" },
  { body: { latitude: 1, longitude: [2] }, field: "longitude", message: "longitude: must be a number" },
  { body: { latitude: 1, longitude: "east" }, field: "longitude", message: "longitude: must be a number" },
  { body: { latitude: 1, longitude: null }, field: "longitude", message: "longitude: must be a number" },
  { body: { latitude: true, longitude: 2 }, field: "latitude", message: "latitude: must be a number" },
  { body: { latitude: 91, longitude: 2 }, field: "latitude", message: "latitude: must be from -90 to 90" },
  { body: { latitude: 1, longitude: "-180.5" }, field: "longitude", message: "longitude: must be from -180 to 180" },
  { body: { latitude: 1, longitude: 2, altitude: {} }, field: "altitude", message: "altitude: must be a number" },
  { body: { latitude: 1, longitude: 2, altitude: 2_000_000 }, field: "altitude", message: "altitude: must be from -100000 to 1000000" },
  { body: { latitude: 1, longitude: 2, timestamp: -1 }, field: "timestamp", message: "timestamp: must be epoch milliseconds or an ISO-8601 date-time, got -1" }
]

interface RestCase extends Case {
  readonly method: "GET" | "POST" | "PUT"
  readonly path: string
}

const rest = (method: RestCase["method"], path: string, body: Record<string, unknown>, field: string, message: string): RestCase => ({
  method,
  path,
  body,
  field,
  message
})
const query = (path: string, field: string, message: string): RestCase => rest("GET", path, {}, field, message)

const SPACE = { id: "spc_nothere" }
const OFFLINE = { name: "Quiet", severity: "high", type: "offline", config: { afterSeconds: 60 } }

/** The rest of the REST surface: resources, commands, alert rules and the query parameters. */
const REST_CASES: ReadonlyArray<RestCase> = [
  rest("POST", "/devices", {}, "name", "name: is required"),
  rest("POST", "/devices", { name: 42, space: SPACE }, "name", "name: must be a string"),
  rest("POST", "/devices", { name: LONG, space: SPACE }, "name", "name: must be at most 200 characters"),
  rest("POST", "/devices", { name: "Meter" }, "space", "space: is required"),
  rest("POST", "/devices", { name: "Meter", space: "spc_1" }, "space", "space: must be an object"),
  rest("POST", "/devices", { name: "Meter", space: { id: 7 } }, "space.id", "space.id: must be a string"),
  rest("POST", "/devices", { name: "Meter", space: SPACE, isMain: "yes" }, "isMain", "isMain: must be a boolean"),
  rest("POST", "/devices", { name: "Meter", space: SPACE, isActive: 1 }, "isActive", "isActive: must be a boolean"),
  rest("POST", "/devices", { name: "Meter", space: SPACE, wifi: { rssi: -40.5 } }, "wifi.rssi", "wifi.rssi: must be an integer"),
  rest("POST", "/devices", { name: "Meter", space: SPACE, state: [1] }, "state", "state: must be an object"),
  rest("POST", "/devices", { name: "Meter", space: SPACE, serialNumber: "x".repeat(1001) }, "serialNumber", "serialNumber: must be at most 1000 characters"),
  rest("PUT", "/devices/dev_nothere", { customId: "" }, "customId", "customId: must not be empty"),
  rest("PUT", "/devices/dev_nothere", { space: { id: null } }, "space.id", "space.id: must be a string"),
  rest("POST", "/spaces", { name: "" }, "name", "name: must not be empty"),
  rest("POST", "/spaces", { name: "Plant", timezone: "Mars/Olympus" }, "timezone", "timezone: must be an IANA time zone name such as Europe/Dublin"),
  rest("POST", "/spaces", { name: "Plant", country: "ie" }, "country", "country: must be an ISO 3166 alpha-3 code such as IRL"),
  rest("POST", "/spaces", { name: "Plant", isPublic: "maybe" }, "isPublic", "isPublic: must be a boolean"),
  rest("POST", "/spaces", { name: "Plant", avatar: { url: 5 } }, "avatar.url", "avatar.url: must be a string"),
  rest("POST", "/commands", { name: "Reboot" }, "device", "device: is required"),
  rest("POST", "/commands", { name: "Reboot", device: {} }, "device", "device: name the device with device.id or device.customId"),
  rest("POST", "/commands", { name: "Reboot", slug: "Re Boot", device: DEVICE }, "slug", "slug: must be lower-case kebab-case"),
  rest("POST", "/commands/run", { slug: LONG, device: DEVICE }, "slug", "slug: must be at most 200 characters"),
  rest("POST", "/commands/run", { slug: "reboot", device: { id: [] } }, "device.id", "device.id: must be a string"),
  rest("POST", "/alertRules", { ...OFFLINE, type: undefined }, "type", "type: is required"),
  rest("POST", "/alertRules", { ...OFFLINE, type: "silence" }, "type", "type: must be one of offline, threshold, anomaly"),
  rest("POST", "/alertRules", { ...OFFLINE, severity: "urgent" }, "severity", "severity: must be one of low, medium, high, critical"),
  rest("POST", "/alertRules", { ...OFFLINE, severity: undefined }, "severity", "severity: is required"),
  rest("POST", "/alertRules", { ...OFFLINE, config: { afterSeconds: 0 } }, "config.afterSeconds", "config.afterSeconds: must be an integer from 1 to 31536000"),
  rest("POST", "/alertRules", { ...OFFLINE, config: { afterSeconds: 1.5 } }, "config.afterSeconds", "config.afterSeconds: must be an integer from 1 to 31536000"),
  rest("POST", "/alertRules", { ...OFFLINE, config: { afterSeconds: "60" } }, "config.afterSeconds", "config.afterSeconds: must be an integer from 1 to 31536000"),
  rest("POST", "/alertRules", { ...OFFLINE, type: "threshold", config: { eventName: "t" } }, "config.min", "config.min: needs min, max or both"),
  rest("POST", "/alertRules", { ...OFFLINE, type: "anomaly", config: { eventName: "t", window: 10, zScore: 0 } }, "config.zScore", "config.zScore: must be greater than 0"),
  rest("POST", "/alertRules", { ...OFFLINE, enabled: "sometimes" }, "enabled", "enabled: must be a boolean"),
  // A union of three configs: the option the value comes closest to names the rule.
  rest("PUT", "/alertRules/rul_nothere", { config: { afterSeconds: 0 } }, "config.afterSeconds", "config.afterSeconds: must be an integer from 1 to 31536000"),
  rest("PUT", "/alertRules/rul_nothere", { config: { eventName: "t", max: "high" } }, "config.max", "config.max: must be a number"),
  rest("PUT", "/alertRules/rul_nothere", { config: "offline" }, "config", "config: must be an object"),
  rest("POST", "/notificationTemplates", { name: "Hook", type: "webhook", webhookUrl: "ftp://example.com" }, "webhookUrl", "webhookUrl: must be an http(s) URL"),
  rest("POST", "/notificationTemplates", { name: "Hook", type: "webhook" }, "webhookUrl", "webhookUrl: is required for a webhook template"),
  rest("POST", "/notificationTemplates", { name: "Hook", type: "sms" }, "type", "type: must be one of webhook, email"),
  rest("POST", "/apiKeys", { name: "k", readOnly: "no" }, "readOnly", "readOnly: must be a boolean"),
  rest("POST", "/organisations/users/", { emailAddress: "not-an-address", fullName: "A" }, "emailAddress", "emailAddress: must be an e-mail address"),
  rest("PUT", "/alerts/alr_nothere/resolve", { resolvedAt: -1 }, "resolvedAt", "resolvedAt: must be at least 0"),
  query("/devices?limit=0", "limit", "limit: must be an integer from 1 to 200, got \"0\""),
  query("/devices?limit=abc", "limit", "limit: must be an integer from 1 to 200, got \"abc\""),
  query("/spaces?page=-1", "page", "page: must be an integer from 0 to 1000000, got \"-1\""),
  query("/spaces?sort=UP", "sort", "sort: must be ASC or DESC, got \"UP\""),
  query("/products?order=password", "order", "order: must be one of createdAt, updatedAt, id, name, got \"password\""),
  query("/gateways?since=yesterday", "since", "since: must be epoch milliseconds or an ISO-8601 date-time, got \"yesterday\""),
  query("/events?device.id=dev_1&until=tomorrow", "until", "until: must be epoch milliseconds or an ISO-8601 date-time, got \"tomorrow\""),
  query(`/events?device.id=${"d".repeat(201)}`, "device.id", "device.id: must be at most 200 characters"),
  query("/energy/electricity?source=coal", "source", "source: must be one of grid, solar, wind, generator, other; got \"coal\""),
  query("/energy/electricity?flow=sideways", "flow", "flow: must be one of consumption, production, import, export; got \"sideways\""),
  query("/energy/gas?timezone=Mars/Olympus", "timezone", "timezone: must be an IANA time zone name such as Europe/Dublin; got \"Mars/Olympus\""),
  query("/energy/water?limit=0", "limit", "limit: must be an integer from 1 to 1000, got \"0\""),
  query("/energy/water?rollups=maybe", "rollups", "rollups: must be true or false, got \"maybe\""),
  query("/energy/electricity?interval=soon", "interval", "interval: must be a whole number, a space and a unit (minute, hour, day, week or month), e.g. \"1 hour\"; got \"soon\""),
  query(`/energy/electricity?space.id=${"s".repeat(201)}`, "space.id", "space.id: must be at most 200 characters")
]

const expectRefusal = (error: { field?: string; message: string } | undefined, expected: Case) => {
  expect(error).toMatchObject({ field: expected.field, message: expected.message })
  expect(error?.message).not.toMatch(RAW_WORDING)
}

describe("validation messages name the field and the rule (API-DECISIONS \"Errors\")", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  describe("over REST", () => {
    for (const c of REST_CASES) {
      it(`${c.method} ${c.path.slice(0, 60)} ${JSON.stringify(c.body).slice(0, 80)} → ${c.message}`, async () => {
        const res = await t.call(c.method, c.path, { key: BOOTSTRAP_KEY, body: c.method === "GET" ? undefined : c.body })
        expect(res.status).toBe(400)
        expect(res.body.error.code).toBe("invalid_request")
        expectRefusal(res.body.error, c)
      })
    }
    for (const [path, cases] of [["/events", EVENT_CASES], ["/locations", LOCATION_CASES]] as const) {
      for (const c of cases) {
        it(`POST ${path} ${JSON.stringify(c.body).slice(0, 80)} → ${c.message}`, async () => {
          const res = await t.call("POST", path, { key: BOOTSTRAP_KEY, body: { device: DEVICE, ...c.body } })
          expect(res.status).toBe(400)
          expectRefusal(res.body.error, c)
        })
      }
    }
  })

  describe("over CoAP", () => {
    for (const [path, cases] of [["/events", EVENT_CASES], ["/locations", LOCATION_CASES]] as const) {
      for (const c of cases) {
        it(`POST ${path} ${JSON.stringify(c.body).slice(0, 80)} → 4.00 ${c.message}`, async () => {
          const payload = new TextEncoder().encode(JSON.stringify({ accessToken: BOOTSTRAP_KEY, device: DEVICE, ...c.body }))
          const reply = await Effect.runPromise(
            Effect.provideContext(handleCoap({ method: "POST", path, contentFormat: "application/json", payload }), t.context)
          )
          expect(reply.code).toBe("4.00")
          expectRefusal(JSON.parse(reply.payload).error, c)
        })
      }
    }
  })
})

describe("validation messages over MQTT", () => {
  const refusal = (topic: string, payload: unknown) => {
    const decoded = decode(topic, JSON.stringify(payload))
    return decoded instanceof InvalidInput ? { field: decoded.field, message: decoded.message } : undefined
  }

  for (const c of EVENT_CASES) {
    it(`events ${JSON.stringify(c.body).slice(0, 80)} → ${c.message}`, () => {
      expectRefusal(refusal("events", { device: DEVICE, ...c.body }), c)
    })
  }
  for (const c of LOCATION_CASES) {
    it(`locations ${JSON.stringify(c.body).slice(0, 80)} → ${c.message}`, () => {
      expectRefusal(refusal("locations", { device: DEVICE, ...c.body }), c)
      const { device: _, ...own } = c.body
      if (!("device" in c.body)) expectRefusal(refusal("devices/dev_1/locations", own), c)
    })
  }

  it("names the rule on a device's event topic: the name comes from the topic, the timestamp from the payload", () => {
    expectRefusal(refusal(`devices/dev_1/events/${LONG}`, { data: 1 }), { body: {}, field: "name", message: "name: must be at most 200 characters" })
    expectRefusal(refusal("devices/dev_1/events/t", { data: 1, timestamp: 1.5 }), {
      body: {},
      field: "timestamp",
      message: "timestamp: must be epoch milliseconds or an ISO-8601 date-time, got 1.5"
    })
  })

  it("names the rule for a command run", () => {
    expectRefusal(refusal("commands", { slug: LONG, device: DEVICE }), { body: {}, field: "slug", message: "slug: must be at most 200 characters" })
    expectRefusal(refusal("commands", { slug: "reboot", device: { id: 1 } }), { body: {}, field: "device.id", message: "device.id: must be a string" })
  })
})

/** Values of every kind, each wrong for most fields: the wrong type, empty, too long, negative, fractional. */
const ODD_VALUES: ReadonlyArray<unknown> = [null, true, -1, 1.5, 1e15, "", "x".repeat(2_001), "not a valid value", [], [1], {}, { id: 7 }]
const ODD_QUERY_VALUES: ReadonlyArray<string> = ["x", "-1", "1.5", "99999999999999999999", "true", "2026-02-30", "x".repeat(2_001)]

type JsonSchema = { $ref?: string; properties?: Record<string, JsonSchema>; anyOf?: Array<JsonSchema>; oneOf?: Array<JsonSchema> }

describe("no 400 of the REST surface answers in zod's own words", () => {
  let t: TestApp
  let operations: Array<{ method: string; path: string; body?: JsonSchema; query: Array<string> }>
  let resolve: (schema: JsonSchema | undefined) => JsonSchema | undefined
  beforeAll(async () => {
    t = await startAppOn("pglite")
    const doc = (await t.call("GET", "/openapi.json")).body
    resolve = (schema) => schema?.$ref === undefined ? schema : resolve(doc.components.schemas[schema.$ref.split("/").pop() ?? ""])
    operations = []
    for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(item)) {
        if (method === "delete") continue
        // A stream never ends, and `call` reads an answer to its end; its one parameter takes any id.
        if (op.responses?.["200"]?.content?.["text/event-stream"] !== undefined) continue
        operations.push({
          method: method.toUpperCase(),
          path: path.replace(/^\/v1/, "").replace(/\{[^}]+\}/g, "nothere"),
          body: op.requestBody?.content?.["application/json"]?.schema,
          query: (op.parameters ?? []).filter((p: { in: string }) => p.in === "query").map((p: { name: string }) => p.name)
        })
      }
    }
  })
  afterAll(() => t.close())

  /** Every top-level and nested property name of a body schema, as dotted paths. */
  const propertiesOf = (schema: JsonSchema | undefined, prefix = ""): Array<string> => {
    const resolved = resolve(schema)
    const variants = [resolved, ...(resolved?.anyOf ?? []), ...(resolved?.oneOf ?? [])].map(resolve)
    return variants.flatMap((variant) =>
      Object.entries(variant?.properties ?? {}).flatMap(([name, inner]) => [`${prefix}${name}`, ...propertiesOf(inner, `${prefix}${name}.`)])
    )
  }

  it("names the field and a rule in every 400 answered to odd bodies and query parameters", async () => {
    const refusals: Array<string> = []
    let sent = 0
    const check = async (method: string, path: string, body: unknown) => {
      // A string is sent as a JSON string, not as the raw body text.
      const res = await t.call(method, path, { key: BOOTSTRAP_KEY, body: typeof body === "string" ? JSON.stringify(body) : body })
      sent++
      expect(res.status, `${method} ${path} ${JSON.stringify(body)}`).toBeLessThan(500)
      if (res.status !== 400) return
      const { field, message } = res.body.error
      refusals.push(message)
      expect(message, `${method} ${path} ${JSON.stringify(body)?.slice(0, 200)}`).not.toMatch(RAW_WORDING)
      expect(message.startsWith(`${field}: `), `${message} names ${field}`).toBe(true)
    }
    for (const op of operations) {
      if (op.body !== undefined && op.method !== "GET") {
        const names = [...new Set(propertiesOf(op.body))]
        for (const value of ODD_VALUES) {
          await check(op.method, op.path, value)
          await check(op.method, op.path, Object.fromEntries(names.filter((n) => !n.includes(".")).map((n) => [n, value])))
          for (const name of names) await check(op.method, op.path, { [name]: value })
        }
      }
      for (const name of op.query) {
        for (const value of ODD_QUERY_VALUES) await check("GET", `${op.path}?${encodeURIComponent(name)}=${encodeURIComponent(value)}`, undefined)
      }
    }
    expect(sent).toBeGreaterThan(1_000)
    expect(refusals.length).toBeGreaterThan(500)
  }, 120_000)
})
