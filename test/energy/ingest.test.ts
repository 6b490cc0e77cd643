import { Context, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { coapError } from "../../src/adapters/coap/errors.ts"
import { mqttRefusal } from "../../src/adapters/mqtt/errors.ts"
import { Auth } from "../../src/auth/Auth.ts"
import { Ingest } from "../../src/ingest/Ingest.ts"
import { addDecimal, formatDecimal, parseDecimal, ZERO } from "../../src/energy/decimal.ts"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"

const at = (iso: string) => Date.parse(iso)

describe.each(STORE_KINDS)("energy readings in on %s", (kind) => {
  let t: TestApp
  let spaceId: string
  const app = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
    t.call(method, path, { key: BOOTSTRAP_KEY, body, headers })
  const newDevice = async () => {
    const res = await app("POST", "/devices", { name: "meter", space: { id: spaceId } })
    return { id: res.body.id as string, key: res.body.secretKey as string }
  }
  /** Daily totals of a device over May 2025 (UTC), as `{day: quantity}` without the zeros. */
  const totals = async (deviceId: string, energy = "electricity", extra = "") => {
    const res = await app("GET", `/energy/${energy}?device.id=${deviceId}&since=2025-05-01T00:00:00Z&until=2025-06-01T00:00:00Z&interval=1%20day${extra}`)
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    const field = energy === "water" ? "water" : "energy"
    return Object.fromEntries(
      res.body.result.filter((r: Record<string, string>) => r[field] !== "0").map((r: Record<string, string | number>) => [
        new Date(r.timestamp).toISOString().slice(0, 10),
        r[field]
      ])
    )
  }

  beforeAll(async () => {
    t = await startAppOn(kind)
    spaceId = (await app("POST", "/spaces", { name: "Plant", timezone: "UTC", country: "IRL" })).body.id
  })
  afterAll(() => t.close())

  it("turns events named electricity, gas and water into readings with their event", async () => {
    const d = await newDevice()
    const publish = async (name: string, data: unknown, timestamp: string) => {
      const res = await t.call("POST", "/events", { key: d.key, body: { name, data, timestamp } })
      expect(res.status, JSON.stringify(res.body)).toBe(200)
      expect(res.body.data).toEqual(data)
    }
    await publish("electricity", 1.5, "2025-05-01T10:00:00Z")
    await publish("electricity", { value: "0.25" }, "2025-05-01T11:00:00Z")
    await publish("electricity", { value: 4, source: "solar", flow: "production" }, "2025-05-02T11:00:00Z")
    await publish("gas", { value: 2 }, "2025-05-03T11:00:00Z")
    await publish("water", 0.125, "2025-05-04T11:00:00Z")
    await publish("temperature", { value: -5 }, "2025-05-04T11:00:00Z")
    expect(await totals(d.id)).toEqual({ "2025-05-01": "1.75" })
    expect(await totals(d.id, "electricity", "&flow=production")).toEqual({ "2025-05-02": "4" })
    expect(await totals(d.id, "electricity", "&flow=production&source=grid")).toEqual({})
    expect(await totals(d.id, "gas")).toEqual({ "2025-05-03": "2" })
    expect(await totals(d.id, "water")).toEqual({ "2025-05-04": "0.125" })
  })

  it("refuses malformed energy data with a 400 naming the field, storing nothing", async () => {
    const d = await newDevice()
    const cases: Array<[unknown, string]> = [
      [-1, "data"],
      ["lots", "data"],
      [{ value: -0.5 }, "data.value"],
      [{ value: "1,5" }, "data.value"],
      [{ meter: -3 }, "data.meter"],
      [{ value: 1, meter: 2 }, "data.meter"],
      [{}, "data.value"],
      [{ value: 1, source: "coal" }, "data.source"],
      [{ value: 1, flow: "sideways" }, "data.flow"],
      [[1, 2], "data"],
      [null, "data"]
    ]
    for (const [data, field] of cases) {
      const res = await t.call("POST", "/events", { key: d.key, body: { name: "electricity", data, timestamp: "2025-05-05T00:00:00Z" } })
      expect(res.status, JSON.stringify(data)).toBe(400)
      expect(res.body.error.field, JSON.stringify(data)).toBe(field)
    }
    const events = await app("GET", `/events?device.id=${d.id}`)
    expect(events.body.count).toBe(0)
  })

  it("refuses them the same way over MQTT and CoAP, which map InvalidInput to their codes", async () => {
    const d = await newDevice()
    const ingest = Context.get(t.context, Ingest)
    const principal = await Effect.runPromise(Context.get(t.context, Auth).authenticate(d.key))
    const error = await Effect.runPromise(Effect.flip(
      ingest.event({ principal, protocol: "mqtt", device: undefined, payload: { name: "gas", data: { value: 1, source: "peat" } } })
    ))
    expect(error).toMatchObject({ _tag: "InvalidInput", field: "data.source" })
    if (error._tag !== "InvalidInput") throw new Error("expected InvalidInput")
    expect(mqttRefusal(error).reasonCode).toBe(0x99)
    expect(coapError(error).code).toBe("4.00")
    const stored = await Effect.runPromise(
      ingest.event({ principal, protocol: "coap", device: undefined, payload: { name: "gas", data: { meter: 5 }, timestamp: at("2025-05-06T00:00:00Z") } })
    )
    expect(stored.device.id).toBe(d.id)
  })

  it("imports a JSON array and NDJSON, all rows or none, naming the first bad row", async () => {
    const d = await newDevice()
    const rows = Array.from({ length: 30 }, (_, i) => ({ device: { id: d.id }, timestamp: at("2025-05-10T00:00:00Z") + i * 60_000, value: 0.5 }))
    const array = await app("POST", "/energy/electricity/readings", rows)
    expect(array.status).toBe(200)
    expect(array.body).toEqual({ imported: 30, stored: 30, baselines: 0 })
    const ndjson = rows.map((r) => JSON.stringify({ ...r, device: d.id, timestamp: new Date(r.timestamp + 86_400_000).toISOString() })).join("\n")
    const lines = await app("POST", "/energy/electricity/readings", `${ndjson}\n`, { "content-type": "application/x-ndjson" })
    expect(lines.status, JSON.stringify(lines.body)).toBe(200)
    expect(await totals(d.id)).toEqual({ "2025-05-10": "15", "2025-05-11": "15" })

    const bad = rows.map((r, i) => (i === 17 ? { ...r, timestamp: "the seventeenth" } : { ...r, timestamp: r.timestamp + 5 * 86_400_000 }))
    const refused = await app("POST", "/energy/electricity/readings", bad)
    expect(refused.status).toBe(400)
    expect(refused.body.error.field).toBe("rows[17].timestamp")
    const stranger = rows.map((r, i) => (i === 3 ? { ...r, device: "dev_nobody" } : { ...r, timestamp: r.timestamp + 5 * 86_400_000 }))
    const unknown = await app("POST", "/energy/electricity/readings", stranger)
    expect(unknown.status).toBe(400)
    expect(unknown.body.error).toMatchObject({ field: "rows[3].device", message: "rows[3].device: device dev_nobody not found" })
    const brokenLine = `${JSON.stringify(rows[0])}\n{"device":\n`
    const malformed = await app("POST", "/energy/electricity/readings", brokenLine, { "content-type": "application/x-ndjson" })
    expect(malformed.status).toBe(400)
    expect(malformed.body.error.field).toBe("rows[1]")
    const negative = await app("POST", "/energy/gas/readings", [{ device: d.id, timestamp: 1, value: -2 }])
    expect(negative.body.error.field).toBe("rows[0].value")
    expect((await app("POST", "/energy/electricity/readings", "device,timestamp", { "content-type": "text/csv" })).status).toBe(415)
    expect((await app("POST", "/energy/electricity/readings", [])).body).toEqual({ imported: 0, stored: 0, baselines: 0 })
    expect((await app("POST", "/energy/electricity/readings", " ", { "content-type": "application/json" })).status).toBe(400)
    expect(await totals(d.id)).toEqual({ "2025-05-10": "15", "2025-05-11": "15" })
  })

  it("sums imports exactly in every rollup, whatever a quantity's size and places, and follows a device that moves", async () => {
    const space = async (name: string) => (await app("POST", "/spaces", { name, timezone: "UTC" })).body.id as string
    const [first, second] = [await space("Sums A"), await space("Sums B")]
    const devices = await Promise.all([0, 1].map(async () => (await app("POST", "/devices", { name: "meter", space: { id: first } })).body.id as string))
    // Millionths summed in doubles (up to 9 integer digits and 6 places, past 2^52 in one
    // bucket), and the exact path: 7 places, 12 integer digits, 20 places.
    const values = ["999999999.999999", "999999999.999999", "999999999.999999", "999999999.999999", "999999999.999999", "999999999.999999",
      "0.25", "0.1234567", "123456789012.5", "0.00000000000000000001", "7", "1.000001"]
    const rows = values.flatMap((value, i) => devices.map((device, d) => ({ device, timestamp: at("2025-05-20T10:00:00Z") + (i * 2 + d) * 60_000, value })))
    const sum = (vs: ReadonlyArray<string>) => formatDecimal(vs.reduce((a, v) => addDecimal(a, parseDecimal(v)!), ZERO))
    const perDevice = sum(values)
    const query = (scope: string, extra = "") =>
      app("GET", `/energy/electricity?${scope}&since=2025-05-20T00:00:00Z&until=2025-05-22T00:00:00Z&interval=1%20day&timezone=UTC${extra}`)
    const figures = async (scope: string) => {
      const fromRollups = await query(scope)
      const fromRaw = await query(scope, "&rollups=false")
      expect(fromRollups.status, JSON.stringify(fromRollups.body)).toBe(200)
      expect(fromRaw.body).toEqual(fromRollups.body)
      const hours = await app("GET", `/energy/electricity?${scope}&since=2025-05-20T10:00:00Z&until=2025-05-20T11:00:00Z&interval=1%20hour`)
      expect(hours.body.result.map((r: { energy: string }) => r.energy)).toEqual([fromRollups.body.result[0].energy])
      return fromRollups.body.result.map((r: { energy: string }) => r.energy)
    }
    expect((await app("POST", "/energy/electricity/readings", rows)).body).toEqual({ imported: 24, stored: 24, baselines: 0 })
    expect(await figures(`device.id=${devices[0]}`)).toEqual([perDevice, "0"])
    expect(await figures(`space.id=${first}`)).toEqual([sum([perDevice, perDevice]), "0"])

    // The second import finds its series known; the device then moves and its next day counts in the new space.
    const nextDay = rows.map((r) => ({ ...r, timestamp: r.timestamp + 86_400_000 }))
    expect((await app("POST", "/energy/electricity/readings", nextDay.filter((r) => r.device === devices[1]))).status).toBe(200)
    const outside = { device: devices[0], timestamp: at("2025-05-25T00:00:00Z"), value: 1 }
    expect((await app("POST", "/energy/electricity/readings", [outside])).status).toBe(200) // known in the first space now
    expect((await app("PUT", `/devices/${devices[0]}`, { space: { id: second } })).status).toBe(200)
    expect((await app("POST", "/energy/electricity/readings", nextDay.filter((r) => r.device === devices[0]))).status).toBe(200)
    expect(await figures(`device.id=${devices[0]}`)).toEqual([perDevice, perDevice])
    expect(await figures(`space.id=${first}`)).toEqual([sum([perDevice, perDevice]), perDevice])
    expect(await figures(`space.id=${second}`)).toEqual(["0", perDevice])
  })

  it("keeps one baseline per meter when imports of it run at once", async () => {
    const d = await newDevice()
    const batch = (from: number) =>
      Array.from({ length: 10 }, (_, i) => ({ device: d.id, timestamp: at("2025-05-20T00:00:00Z") + (from + i) * 3_600_000, meter: from + i + 1 }))
    const [first, second] = await Promise.all([
      app("POST", "/energy/water/readings", batch(0)),
      app("POST", "/energy/water/readings", batch(10))
    ])
    expect(first.status).toBe(200)
    expect(second.status).toBe(200)
    // Whichever commits first sets the only baseline; the other continues from it (or resets
    // below it): 19 either way. Two baselines would give 18.
    expect(first.body.baselines + second.body.baselines).toBe(1)
    expect(await totals(d.id, "water")).toEqual({ "2025-05-20": "19" })
  })

  it("continues a meter from events into an import and back", async () => {
    const d = await newDevice()
    const meter = async (value: number, timestamp: string) =>
      expect((await t.call("POST", "/events", { key: d.key, body: { name: "electricity", data: { meter: value }, timestamp } })).status).toBe(200)
    await meter(1000, "2025-05-25T00:00:00Z")
    await meter(1002.5, "2025-05-25T01:00:00Z")
    const imported = await app("POST", "/energy/electricity/readings", [
      { device: d.id, timestamp: "2025-05-25T03:00:00Z", meter: 1010 },
      { device: d.id, timestamp: "2025-05-25T02:00:00Z", meter: 1004 }
    ])
    expect(imported.body).toEqual({ imported: 2, stored: 2, baselines: 0 })
    await meter(5, "2025-05-26T00:00:00Z") // replaced meter: a reset
    expect(await totals(d.id)).toEqual({ "2025-05-25": "10", "2025-05-26": "5" })
  })
})
