import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"

/** Every list endpoint takes the shared list parameters. */
const LIST_ENDPOINTS = ["/devices", "/spaces", "/products", "/places", "/gateways", "/apiKeys"]

/**
 * Lists of one device's traffic: also the shared list parameters, given with a valid
 * `device.id` (events and locations require one of an application key), and each with the
 * default `order` of its resource (events and locations `timestamp`).
 */
const DEVICE_LIST_ENDPOINTS: ReadonlyArray<{ readonly path: string; readonly plural: string; readonly order: string; readonly requiresDevice: boolean }> = [
  { path: "/events", plural: "events", order: "timestamp", requiresDevice: true },
  { path: "/locations", plural: "locations", order: "timestamp", requiresDevice: true },
  { path: "/commands", plural: "commands", order: "createdAt", requiresDevice: false }
]

/** parameter → values that must be refused with a 400 naming it. */
const BAD_VALUES: Record<string, ReadonlyArray<string>> = {
  limit: ["0", "201", "-1", "abc", "1.5", "1e2"],
  page: ["-1", "x", "0.5"],
  sort: ["UP", "random", "1"],
  order: ["password", "secret_hash", "id;drop table devices"],
  since: ["yesterday", "2026-13-45T00:00:00Z", "12abc"],
  until: ["tomorrow", "2026-02-30T25:00:00Z"]
}

const GOOD_QUERIES = ["limit=1", "limit=200", "page=3", "sort=asc", "sort=DESC", "order=createdAt", "since=0", "since=2026-01-01T00:00:00Z", "until=1795000000000"]

describe("list parameter validation", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  for (const endpoint of LIST_ENDPOINTS) {
    for (const [param, values] of Object.entries(BAD_VALUES)) {
      for (const value of values) {
        it(`GET ${endpoint}?${param}=${value} answers 400 naming ${param}`, async () => {
          const res = await t.call("GET", `${endpoint}?${param}=${encodeURIComponent(value)}`, { key: BOOTSTRAP_KEY })
          expect(res.status).toBe(400)
          expect(res.body.error.code).toBe("invalid_request")
          expect(res.body.error.field).toBe(param)
          expect(res.body.error.message).toMatch(new RegExp(`^${param}: `))
        })
      }
    }
    for (const query of GOOD_QUERIES) {
      it(`GET ${endpoint}?${query} is accepted`, async () => {
        const res = await t.call("GET", `${endpoint}?${query}`, { key: BOOTSTRAP_KEY })
        expect(res.status).toBe(200)
        expect(res.headers.get("x-total-count")).toMatch(/^\d+$/)
      })
    }
  }
})

describe("list parameter validation of a device's events, locations and commands", () => {
  let t: TestApp
  let deviceId: string
  beforeAll(async () => {
    t = await startAppOn("pglite")
    const space = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Home" } })
    const device = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Meter", space: { id: space.body.id } } })
    expect(device.status).toBe(200)
    deviceId = device.body.id
    // One of each, so that an accepted query has something to answer.
    for (const [path, body] of [
      ["/events", { name: "boot", device: { id: deviceId } }],
      ["/locations", { latitude: 1, longitude: 2, device: { id: deviceId } }],
      ["/commands", { name: "Reboot", device: { id: deviceId } }]
    ] as const) {
      expect((await t.call("POST", path, { key: BOOTSTRAP_KEY, body })).status).toBe(200)
    }
  })
  afterAll(() => t.close())

  for (const { path, plural, order, requiresDevice } of DEVICE_LIST_ENDPOINTS) {
    for (const [param, values] of Object.entries(BAD_VALUES)) {
      for (const value of values) {
        it(`GET ${path}?device.id=…&${param}=${value} answers 400 naming ${param}`, async () => {
          const res = await t.call("GET", `${path}?device.id=${deviceId}&${param}=${encodeURIComponent(value)}`, { key: BOOTSTRAP_KEY })
          expect(res.status).toBe(400)
          expect(res.body.error.code).toBe("invalid_request")
          expect(res.body.error.field).toBe(param)
          expect(res.body.error.message).toMatch(new RegExp(`^${param}: `))
        })
      }
    }
    for (const query of GOOD_QUERIES.map((q) => q.startsWith("order=") ? `order=${order}` : q)) {
      it(`GET ${path}?device.id=…&${query} is accepted`, async () => {
        const res = await t.call("GET", `${path}?device.id=${deviceId}&${query}`, { key: BOOTSTRAP_KEY })
        expect(res.status).toBe(200)
        expect(res.headers.get("x-total-count")).toMatch(/^\d+$/)
        expect(res.body[plural]).toBeInstanceOf(Array)
        expect(res.body.count).toBe(Number(res.headers.get("x-total-count")))
      })
    }
    if (requiresDevice) {
      it(`GET ${path} without device.id answers 400 naming device.id`, async () => {
        const res = await t.call("GET", `${path}?limit=5`, { key: BOOTSTRAP_KEY })
        expect(res.status).toBe(400)
        expect(res.body.error).toMatchObject({ code: "invalid_request", field: "device.id", message: "device.id: is required" })
      })
    }
    it(`GET ${path}?device.id= of an unknown device answers 404`, async () => {
      const res = await t.call("GET", `${path}?device.id=dev_nothere`, { key: BOOTSTRAP_KEY })
      expect(res.status).toBe(404)
      expect(res.body.error.message).toBe("device dev_nothere not found")
    })
  }

  it("refuses an order that is another resource's column (events are ordered by timestamp, not createdAt)", async () => {
    const res = await t.call("GET", `/events?device.id=${deviceId}&order=createdAt`, { key: BOOTSTRAP_KEY })
    expect(res.status).toBe(400)
    expect(res.body.error.field).toBe("order")
  })
})

describe("request bodies and unknown routes", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  it("answers 400 for malformed JSON and stores nothing", async () => {
    const res = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: "{\"name\": " })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ status: 400, code: "invalid_request", field: "body" })
    const list = await t.call("GET", "/spaces", { key: BOOTSTRAP_KEY })
    expect(list.body.count).toBe(0)
  })

  it("names a missing required field", async () => {
    const res = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: {} })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ field: "name", message: "name: is required" })
  })

  it("names a field of the wrong type", async () => {
    const res = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: 42 } })
    expect(res.status).toBe(400)
    expect(res.body.error.field).toBe("name")
  })

  it("names a nested field by its dotted path", async () => {
    const res = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "d", space: { id: 7 } } })
    expect(res.status).toBe(400)
    expect(res.body.error.field).toBe("space.id")
  })

  it("refuses an unknown time zone and a bad country code", async () => {
    const tz = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "s", timezone: "Mars/Olympus" } })
    expect(tz.status).toBe(400)
    expect(tz.body.error.field).toBe("timezone")
    const country = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "s", country: "ie" } })
    expect(country.status).toBe(400)
    expect(country.body.error.field).toBe("country")
  })

  it("accepts form-encoded bodies with dotted keys", async () => {
    const space = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Plant" } })
    const res = await t.call("POST", "/devices", {
      key: BOOTSTRAP_KEY,
      body: new URLSearchParams({ name: "Pump", "space.id": space.body.id, isMain: "true" }).toString(),
      headers: { "content-type": "application/x-www-form-urlencoded" }
    })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ name: "Pump", isMain: true, space: { id: space.body.id } })
  })

  it("takes a form's numbers where the schema wants numbers, and still names a field that is not one", async () => {
    const form = (method: string, path: string, fields: Record<string, string>) =>
      t.call(method, path, {
        key: BOOTSTRAP_KEY,
        body: new URLSearchParams(fields).toString(),
        headers: { "content-type": "application/x-www-form-urlencoded" }
      })
    const space = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Form plant" } })
    const device = await form("POST", "/devices", { name: "Meter", "space.id": space.body.id, "wifi.rssi": "-40", "wifi.macAddress": "00:11" })
    expect(device.status).toBe(200)
    expect(device.body.wifi).toEqual({ rssi: -40, macAddress: "00:11" })
    const rule = await form("POST", "/alertRules", { name: "Quiet", type: "offline", severity: "low", "config.afterSeconds": "60", autoResolve: "true" })
    expect(rule.status).toBe(200)
    expect(rule.body).toMatchObject({ type: "offline", autoResolve: true, config: { afterSeconds: 60 } })
    const threshold = await form("POST", "/alertRules", { name: "Hot", type: "threshold", severity: "high", "config.eventName": "t", "config.max": "80.5" })
    expect(threshold.body.config).toEqual({ eventName: "t", max: 80.5 })
    const updated = await form("PUT", `/alertRules/${rule.body.id}`, { "config.afterSeconds": "90" })
    expect(updated.body.config).toEqual({ afterSeconds: 90 })

    const notNumber = await form("POST", "/devices", { name: "Meter 2", "space.id": space.body.id, "wifi.rssi": "strong" })
    expect(notNumber.status).toBe(400)
    expect(notNumber.body.error.field).toBe("wifi.rssi")
    const hex = await form("POST", "/alertRules", { name: "Quiet", type: "offline", severity: "low", "config.afterSeconds": "0x3c" })
    expect(hex.body.error.field).toBe("config.afterSeconds")
    // A string field keeps a value that reads as a number.
    const named = await form("POST", "/devices", { name: "1234", "space.id": space.body.id, serialNumber: "007" })
    expect(named.body).toMatchObject({ name: "1234", serialNumber: "007" })
  })

  it("answers 415 for an unsupported content type", async () => {
    const res = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: "<space/>", headers: { "content-type": "application/xml" } })
    expect(res.status).toBe(415)
    expect(res.body.error.code).toBe("unsupported_media_type")
  })

  it("answers 413 for an oversized body and stores nothing", async () => {
    const res = await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "x", avatar: { url: "x".repeat(2 * 1024 * 1024) } } })
    expect(res.status).toBe(413)
    expect(res.body.error.code).toBe("payload_too_large")
    expect((await t.call("GET", "/spaces", { key: BOOTSTRAP_KEY })).body.spaces.every((s: { name: string }) => s.name !== "x")).toBe(true)
  })

  it("answers 404 with the JSON error body for an unknown route", async () => {
    const res = await t.call("GET", "/no-such-thing", { key: BOOTSTRAP_KEY })
    expect(res.status).toBe(404)
    expect(res.body.error).toMatchObject({ status: 404, code: "not_found" })
  })

  it("answers 405 with Allow for a wrong method", async () => {
    const res = await t.call("PATCH", "/spaces", { key: BOOTSTRAP_KEY })
    expect(res.status).toBe(405)
    expect(res.headers.get("allow")).toContain("GET")
    expect(res.body.error.code).toBe("method_not_allowed")
  })

  it("answers 404 for an unknown id", async () => {
    const res = await t.call("GET", "/devices/dev_nothere", { key: BOOTSTRAP_KEY })
    expect(res.status).toBe(404)
    expect(res.body.error.message).toBe("device dev_nothere not found")
  })

  it("serves /health and /ready without credentials", async () => {
    expect((await t.app.request("/health")).status).toBe(200)
    expect((await t.app.request("/ready")).status).toBe(200)
  })

  it("serves an OpenAPI 3.1 document with every resource path", async () => {
    const res = await t.call("GET", "/openapi.json")
    expect(res.status).toBe(200)
    expect(res.body.openapi).toBe("3.1.0")
    for (const path of ["/v1/devices", "/v1/devices/{id}", "/v1/spaces", "/v1/apiKeys", "/v1/auth/token", "/v1/whoami", "/v1/organisations"]) {
      expect(Object.keys(res.body.paths)).toContain(path)
    }
    const limit = res.body.paths["/v1/devices"].get.parameters.find((p: { name: string }) => p.name === "limit")
    expect(limit.schema).toMatchObject({ type: "integer", minimum: 1, maximum: 200 })
  })

  it("serves the reference page at /docs", async () => {
    const res = await t.app.request("/docs")
    expect(res.status).toBe(200)
    expect(await res.text()).toContain("/v1/openapi.json")
  })
})
