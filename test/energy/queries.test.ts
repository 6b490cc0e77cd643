import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"

const at = (iso: string) => Date.parse(iso)
const HOUR = 3_600_000

interface Reading {
  timestamp: number
  energy?: string
  gas?: string
  water?: string
}

/** `[[iso, quantity], …]` of a result, to compare with hand-computed expectations. */
const pairs = (readings: Array<Reading>, field: "energy" | "gas" | "water" = "energy") =>
  readings.map((r) => [new Date(r.timestamp).toISOString().replace(".000", ""), r[field]])

describe.each(STORE_KINDS)("energy series on %s", (kind) => {
  let t: TestApp
  const app = (method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => t.call(method, path, { key, body })
  const space = async (timezone: string, country?: string) =>
    (await app("POST", "/spaces", { name: `${timezone} site`, timezone, ...(country ? { country } : {}) })).body.id as string
  const device = async (spaceId: string, key = BOOTSTRAP_KEY) =>
    (await app("POST", "/devices", { name: "meter", space: { id: spaceId } }, key)).body.id as string
  const load = async (rows: Array<Record<string, unknown>>, energy = "electricity", key = BOOTSTRAP_KEY) => {
    const res = await app("POST", `/energy/${energy}/readings`, rows, key)
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    return res.body
  }
  /** The same query from rollups and from raw readings: both must agree. */
  const query = async (path: string, key = BOOTSTRAP_KEY) => {
    const res = await app("GET", path, undefined, key)
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    const raw = await app("GET", `${path}&rollups=false`, undefined, key)
    // The tokens differ (each carries its own rollups flag); the figures may not.
    expect({ ...raw.body, continuationToken: raw.body.continuationToken !== null }).toEqual({
      ...res.body,
      continuationToken: res.body.continuationToken !== null
    })
    return res.body
  }
  const hourly = (deviceId: string, from: string, to: string, value = "1") => {
    const rows = []
    for (let ts = at(from); ts < at(to); ts += HOUR) rows.push({ device: deviceId, timestamp: ts, value })
    return rows
  }

  beforeAll(async () => {
    t = await startAppOn(kind)
  })
  afterAll(() => t.close())

  it("sums 15-minute buckets, since inclusive and until exclusive, with empty buckets as \"0\"", async () => {
    const d = await device(await space("UTC"))
    await load([
      { device: d, timestamp: "2025-01-01T10:00:00Z", value: 1 },
      { device: d, timestamp: "2025-01-01T10:14:59.999Z", value: 2 },
      { device: d, timestamp: "2025-01-01T10:15:00Z", value: "4" },
      { device: d, timestamp: "2025-01-01T10:44:00Z", value: 8 },
      { device: d, timestamp: "2025-01-01T11:00:00Z", value: 16 }
    ])
    const body = await query(`/energy/electricity?device.id=${d}&since=2025-01-01T10:00:00Z&until=2025-01-01T11:00:00Z&interval=15%20minutes`)
    expect(pairs(body.result)).toEqual([
      ["2025-01-01T10:00:00Z", "3"],
      ["2025-01-01T10:15:00Z", "4"],
      ["2025-01-01T10:30:00Z", "8"],
      ["2025-01-01T10:45:00Z", "0"]
    ])
    expect(body.continuationToken).toBeNull()
    const clipped = await query(`/energy/electricity?device.id=${d}&since=${at("2025-01-01T10:05:00Z")}&until=${at("2025-01-01T10:20:00Z")}&interval=15%20minutes`)
    expect(pairs(clipped.result)).toEqual([["2025-01-01T10:00:00Z", "2"], ["2025-01-01T10:15:00Z", "4"]])
  })

  it("sums 2-hour buckets from local midnight", async () => {
    const d = await device(await space("UTC"))
    await load([
      { device: d, timestamp: "2025-02-01T00:30:00Z", value: 1.5 },
      { device: d, timestamp: "2025-02-01T01:59:00Z", value: 2.25 },
      { device: d, timestamp: "2025-02-01T02:00:00Z", value: 4 },
      { device: d, timestamp: "2025-02-01T05:00:00Z", value: 8 }
    ])
    const body = await query(`/energy/electricity?device.id=${d}&since=2025-02-01T00:00:00Z&until=2025-02-01T06:00:00Z&interval=2%20hours`)
    expect(pairs(body.result)).toEqual([["2025-02-01T00:00:00Z", "3.75"], ["2025-02-01T02:00:00Z", "4"], ["2025-02-01T04:00:00Z", "8"]])
  })

  it("sums days, Monday weeks and months of a space in its own time zone", async () => {
    const s = await space("Europe/Dublin")
    const d = await device(s)
    await load([
      // UTC 23:30 on 31 March is 00:30 on 1 April in Dublin (summer time).
      { device: d, timestamp: "2025-03-31T22:30:00Z", value: 1 },
      { device: d, timestamp: "2025-03-31T23:30:00Z", value: 2 },
      { device: d, timestamp: "2025-03-02T12:00:00Z", value: 4 }, // a Sunday
      { device: d, timestamp: "2025-03-03T00:00:00Z", value: 8 }, // Monday, midnight GMT
      { device: d, timestamp: "2025-04-15T12:00:00Z", value: 16 }
    ])
    const days = await query(`/energy/electricity?space.id=${s}&since=2025-03-31T00:00:00Z&until=2025-04-02T00:00:00Z&interval=1%20day`)
    expect(pairs(days.result)).toEqual([["2025-03-30T23:00:00Z", "1"], ["2025-03-31T23:00:00Z", "2"], ["2025-04-01T23:00:00Z", "0"]])
    const weeks = await query(`/energy/electricity?space.id=${s}&since=2025-02-24T00:00:00Z&until=2025-03-17T00:00:00Z&interval=1%20week`)
    expect(pairs(weeks.result)).toEqual([["2025-02-24T00:00:00Z", "4"], ["2025-03-03T00:00:00Z", "8"], ["2025-03-10T00:00:00Z", "0"]])
    const months = await query(`/energy/electricity?space.id=${s}&since=2025-03-01T00:00:00Z&until=2025-04-30T23:00:00Z&interval=1%20month`)
    expect(pairs(months.result)).toEqual([["2025-03-01T00:00:00Z", "13"], ["2025-03-31T23:00:00Z", "18"]])
    const utcMonths = await query(`/energy/electricity?space.id=${s}&since=2025-03-01T00:00:00Z&until=2025-05-01T00:00:00Z&interval=1%20month&timezone=UTC`)
    expect(pairs(utcMonths.result)).toEqual([["2025-03-01T00:00:00Z", "15"], ["2025-04-01T00:00:00Z", "16"]])
  })

  it("gives Dublin days of 23 and 25 hours across both changes of 2025", async () => {
    const s = await space("Europe/Dublin")
    const d = await device(s)
    await load([...hourly(d, "2025-03-28T00:00:00Z", "2025-04-02T00:00:00Z"), ...hourly(d, "2025-10-24T00:00:00Z", "2025-10-29T00:00:00Z")])
    const march = await query(`/energy/electricity?space.id=${s}&since=2025-03-29T00:00:00Z&until=2025-03-31T23:00:00Z&interval=1%20day`)
    expect(pairs(march.result)).toEqual([["2025-03-29T00:00:00Z", "24"], ["2025-03-30T00:00:00Z", "23"], ["2025-03-30T23:00:00Z", "24"]])
    const october = await query(`/energy/electricity?space.id=${s}&since=2025-10-24T23:00:00Z&until=2025-10-28T00:00:00Z&interval=1%20day`)
    expect(pairs(october.result)).toEqual([["2025-10-24T23:00:00Z", "24"], ["2025-10-25T23:00:00Z", "25"], ["2025-10-27T00:00:00Z", "24"]])
    const hours = await query(`/energy/electricity?space.id=${s}&since=2025-10-25T23:00:00Z&until=2025-10-27T00:00:00Z`)
    expect(hours.result).toHaveLength(25)
    expect(hours.result.every((r: Reading) => r.energy === "1")).toBe(true)
  })

  it("gives New York days of 23 and 25 hours across both changes of 2025", async () => {
    const s = await space("America/New_York")
    const d = await device(s)
    await load([...hourly(d, "2025-03-08T00:00:00Z", "2025-03-12T00:00:00Z", "0.5"), ...hourly(d, "2025-11-01T00:00:00Z", "2025-11-05T00:00:00Z", "0.5")])
    const march = await query(`/energy/electricity?space.id=${s}&since=2025-03-08T05:00:00Z&until=2025-03-11T04:00:00Z&interval=1%20day`)
    expect(pairs(march.result)).toEqual([["2025-03-08T05:00:00Z", "12"], ["2025-03-09T05:00:00Z", "11.5"], ["2025-03-10T04:00:00Z", "12"]])
    const november = await query(`/energy/electricity?space.id=${s}&since=2025-11-01T04:00:00Z&until=2025-11-04T05:00:00Z&interval=1%20day`)
    expect(pairs(november.result)).toEqual([["2025-11-01T04:00:00Z", "12"], ["2025-11-02T04:00:00Z", "12.5"], ["2025-11-03T05:00:00Z", "12"]])
    // The same days seen from UTC are 24 hours each, whatever the space's zone.
    const utc = await query(`/energy/electricity?space.id=${s}&since=2025-03-09T00:00:00Z&until=2025-03-10T00:00:00Z&interval=1%20day&timezone=UTC`)
    expect(pairs(utc.result)).toEqual([["2025-03-09T00:00:00Z", "12"]])
  })

  it("answers current and previous periods aligned in the time zone", async () => {
    const s = await space("UTC")
    let d = ""
    for (let attempt = 0; attempt < 2; attempt++) {
      d = await device(s)
      const now = Date.now()
      const today = now - (now % (24 * HOUR))
      await load([{ device: d, timestamp: now, value: 5 }, { device: d, timestamp: today - 1, value: 7 }])
      const current = await query(`/energy/electricity?device.id=${d}&current=day&interval=1%20day`)
      const previous = await query(`/energy/electricity?device.id=${d}&previous=day&interval=1%20day`)
      const hours = await query(`/energy/electricity?device.id=${d}&current=day`)
      if (Date.now() - (Date.now() % (24 * HOUR)) !== today) continue // midnight passed meanwhile
      expect(current.result).toEqual([{ energy: "5", timestamp: today }])
      expect(previous.result).toEqual([{ energy: "7", timestamp: today - 24 * HOUR }])
      expect(hours.result).toHaveLength(24)
      expect(hours.result[0].timestamp).toBe(today)
      break
    }
    const kolkata = await query(`/energy/electricity?device.id=${d}&current=hour&timezone=Asia/Kolkata&interval=15%20minutes`)
    expect(kolkata.result).toHaveLength(4)
    expect(new Date(kolkata.result[0].timestamp).getUTCMinutes()).toBe(30)
    const week = await query(`/energy/electricity?device.id=${d}&previous=week&interval=1%20day&timezone=Europe/Dublin`)
    expect(week.result).toHaveLength(7)
    expect(new Date(week.result[0].timestamp + HOUR * 2).getUTCDay()).toBe(1) // a Monday, at local midnight
  })

  it("breaks an organisation down by device and by its spaces' country", async () => {
    const org = await app("POST", "/organisations", { name: "Breakdown Ltd", owner: { emailAddress: `b-${kind}@example.com`, fullName: "B Owner", password: "correct horse battery" } })
    expect(org.status).toBe(200)
    const key = org.body.apiKey.secretKey as string
    const irl = (await app("POST", "/spaces", { name: "Cork", timezone: "Europe/Dublin", country: "IRL" }, key)).body.id
    const usa = (await app("POST", "/spaces", { name: "Boston", timezone: "America/New_York", country: "USA" }, key)).body.id
    const [a, b, c] = [await device(irl, key), await device(irl, key), await device(usa, key)]
    // A device first named by an event's customId belongs to no space.
    const event = await app("POST", "/events", { name: "electricity", data: 16, timestamp: "2025-06-01T04:00:00Z", device: { customId: "loose-1" } }, key)
    expect(event.status).toBe(200)
    const loose = event.body.device.id as string
    await load([
      { device: a, timestamp: "2025-06-01T01:00:00Z", value: 1 },
      { device: b, timestamp: "2025-06-01T02:00:00Z", value: 2 },
      { device: b, timestamp: "2025-06-02T02:00:00Z", value: 4, source: "solar" },
      { device: c, timestamp: "2025-06-02T03:00:00Z", value: 8 },
      { device: c, timestamp: "2025-06-01T05:00:00Z", value: 32, flow: "production", source: "solar" }
    ], "electricity", key)
    const window = "since=2025-06-01T00:00:00Z&until=2025-06-03T00:00:00Z&interval=1%20day"
    const byDevice = await query(`/energy/electricity?${window}&breakdown=device`, key)
    expect(pairs(byDevice.result)).toEqual([["2025-06-01T00:00:00Z", "19"], ["2025-06-02T00:00:00Z", "12"]])
    expect(Object.keys(byDevice.devices).sort()).toEqual([a, b, c, loose].sort())
    expect(pairs(byDevice.devices[b])).toEqual([["2025-06-01T00:00:00Z", "2"], ["2025-06-02T00:00:00Z", "4"]])
    expect(pairs(byDevice.devices[a])).toEqual([["2025-06-01T00:00:00Z", "1"], ["2025-06-02T00:00:00Z", "0"]])
    const byCountry = await query(`/energy/electricity?${window}&breakdown=country`, key)
    expect(byCountry.result).toEqual(byDevice.result)
    expect(byCountry.countries).toEqual({
      IRL: [{ energy: "3", timestamp: at("2025-06-01T00:00:00Z") }, { energy: "4", timestamp: at("2025-06-02T00:00:00Z") }],
      USA: [{ energy: "0", timestamp: at("2025-06-01T00:00:00Z") }, { energy: "8", timestamp: at("2025-06-02T00:00:00Z") }],
      unknown: [{ energy: "16", timestamp: at("2025-06-01T00:00:00Z") }, { energy: "0", timestamp: at("2025-06-02T00:00:00Z") }]
    })
    const solar = await query(`/energy/electricity?${window}&source=solar`, key)
    expect(pairs(solar.result)).toEqual([["2025-06-01T00:00:00Z", "0"], ["2025-06-02T00:00:00Z", "4"]])
    const produced = await query(`/energy/electricity?${window}&flow=production&breakdown=country`, key)
    expect(pairs(produced.result)).toEqual([["2025-06-01T00:00:00Z", "32"], ["2025-06-02T00:00:00Z", "0"]])
    expect(Object.keys(produced.countries)).toEqual(["USA"])
    const spaceOnly = await query(`/energy/electricity?space.id=${irl}&${window}&breakdown=device`, key)
    expect(Object.keys(spaceOnly.devices).sort()).toEqual([a, b].sort())
    // A space's series is cut in its own zone (Dublin, summer time) unless the query names one.
    expect(pairs(spaceOnly.result)).toEqual([["2025-05-31T23:00:00Z", "3"], ["2025-06-01T23:00:00Z", "4"], ["2025-06-02T23:00:00Z", "0"]])
    // Another organisation's space or device is not found; its own organisation-wide series is its own.
    expect((await app("GET", `/energy/electricity?space.id=${irl}`)).status).toBe(404)
    expect((await app("GET", `/energy/electricity?device.id=${a}`)).status).toBe(404)
  })

  it("turns meter registers into consumption, counting a decrease as a reset", async () => {
    const d = await device(await space("UTC"))
    const events = [[100, "10:00"], [100.5, "11:00"], [102, "12:00"], [1.25, "13:00"], [2, "14:00"]] as const
    for (const [meter, time] of events) {
      const res = await app("POST", "/events", { name: "electricity", data: { meter }, timestamp: `2025-05-01T${time}:00Z`, device: { id: d } })
      expect(res.status).toBe(200)
    }
    const body = await query(`/energy/electricity?device.id=${d}&since=2025-05-01T10:00:00Z&until=2025-05-01T15:00:00Z`)
    expect(pairs(body.result)).toEqual([
      ["2025-05-01T10:00:00Z", "0"],
      ["2025-05-01T11:00:00Z", "0.5"],
      ["2025-05-01T12:00:00Z", "1.5"],
      ["2025-05-01T13:00:00Z", "1.25"],
      ["2025-05-01T14:00:00Z", "0.75"]
    ])
  })

  it("pages through a long series without repeating or skipping a bucket", async () => {
    const d = await device(await space("Europe/Dublin"))
    const rows = []
    for (let ts = at("2025-10-25T00:00:00Z"); ts < at("2025-10-27T00:00:00Z"); ts += 15 * 60_000) rows.push({ device: d, timestamp: ts, value: "0.25" })
    await load(rows)
    const seen: Array<Reading> = []
    let path: string | undefined = `/energy/electricity?device.id=${d}&since=2025-10-25T00:00:00Z&until=2025-10-27T00:00:00Z&interval=1%20minute`
    let pages = 0
    while (path !== undefined) {
      const body = await query(path)
      pages++
      expect(body.result.length).toBeLessThanOrEqual(1000)
      seen.push(...body.result)
      path = body.continuationToken === null ? undefined : `/energy/electricity?continuationToken=${encodeURIComponent(body.continuationToken)}`
    }
    expect(pages).toBe(3)
    expect(seen).toHaveLength(48 * 60)
    expect(seen.every((r, i) => r.timestamp === at("2025-10-25T00:00:00Z") + i * 60_000)).toBe(true)
    const total = seen.reduce((sum, r) => sum + Number(r.energy), 0)
    expect(total).toBe(48)
    // Small pages of the same series, and a token is bound to its endpoint.
    const first = await query(`/energy/electricity?device.id=${d}&since=2025-10-25T00:00:00Z&until=2025-10-27T00:00:00Z&interval=1%20hour&limit=20`)
    expect(first.result).toHaveLength(20)
    const second = await query(`/energy/electricity?continuationToken=${encodeURIComponent(first.continuationToken)}`)
    expect(second.result[0].timestamp).toBe(first.result[19].timestamp + HOUR)
    const third = await query(`/energy/electricity?continuationToken=${encodeURIComponent(second.continuationToken)}`)
    expect(third.continuationToken).toBeNull()
    expect(first.result.length + second.result.length + third.result.length).toBe(48)
    const wrong = await app("GET", `/energy/gas?continuationToken=${encodeURIComponent(first.continuationToken)}`)
    expect(wrong.status).toBe(400)
    expect(wrong.body.error.field).toBe("continuationToken")
  })

  it("starts at the first reading without since, and answers gas and water in their own fields", async () => {
    const d = await device(await space("UTC"))
    await load([{ device: d, timestamp: "2025-07-01T10:20:00Z", value: 1.5 }, { device: d, timestamp: "2025-07-01T12:10:00Z", value: 2 }], "gas")
    await load([{ device: d, timestamp: "2025-07-01T10:20:00Z", meter: 10 }, { device: d, timestamp: "2025-07-01T09:00:00Z", meter: 7 }], "water")
    const gas = await query(`/energy/gas?device.id=${d}&until=2025-07-01T13:00:00Z`)
    expect(gas.result).toEqual([
      { gas: "1.5", energy: "1.5", timestamp: at("2025-07-01T10:00:00Z") },
      { gas: "0", energy: "0", timestamp: at("2025-07-01T11:00:00Z") },
      { gas: "2", energy: "2", timestamp: at("2025-07-01T12:00:00Z") }
    ])
    // Registers of an import are taken in timestamp order: 7 sets the baseline, 10 adds 3.
    const water = await query(`/energy/water?device.id=${d}&until=2025-07-02T00:00:00Z&interval=1%20day`)
    expect(water.result).toEqual([{ water: "3", timestamp: at("2025-07-01T00:00:00Z") }])
    const electricity = await query(`/energy/electricity?device.id=${d}&until=2025-07-02T00:00:00Z`)
    expect(electricity.result).toEqual([])
  })

  it("refuses bad parameters with a 400 naming the parameter", async () => {
    const s = await space("UTC")
    const d = await device(s)
    const cases: Array<[string, string]> = [
      ["interval=0%20hours", "interval"],
      ["interval=3%20fortnights", "interval"],
      ["interval=hourly", "interval"],
      ["timezone=Mars/Olympus_Mons", "timezone"],
      ["since=2025-02-01T00:00:00Z&until=2025-01-01T00:00:00Z", "since"],
      ["since=yesterday", "since"],
      ["current=day&previous=day", "previous"],
      ["current=fortnight", "current"],
      ["current=day&since=2025-01-01T00:00:00Z", "current"],
      ["breakdown=planet", "breakdown"],
      ["source=coal", "source"],
      ["flow=sideways", "flow"],
      ["limit=0", "limit"],
      ["continuationToken=bm9wZQ", "continuationToken"],
      [`space.id=${s}&device.id=${d}`, "device.id"]
    ]
    for (const [params, field] of cases) {
      const res = await app("GET", `/energy/electricity?${params}`)
      expect(res.status, params).toBe(400)
      expect(res.body.error.field, params).toBe(field)
    }
    expect((await app("GET", "/energy/electricity?space.id=spc_unknown")).status).toBe(404)
    expect((await app("GET", "/energy/electricity?device.id=dev_unknown")).status).toBe(404)
    expect((await app("GET", "/energy/steam")).status).toBe(404)
  })

  it("documents every parameter and the import body in the OpenAPI document", async () => {
    const doc = (await t.call("GET", "/openapi.json")).body
    const names = doc.paths["/v1/energy/gas"].get.parameters.map((p: { name: string }) => p.name)
    expect(names).toEqual(expect.arrayContaining([
      "space.id", "device.id", "since", "until", "interval", "timezone", "current", "previous", "breakdown", "source", "flow", "continuationToken"
    ]))
    expect(Object.keys(doc.paths["/v1/energy/water/readings"].post.requestBody.content)).toEqual(["application/json", "application/x-ndjson"])
  })

  it("serves read credentials of the organisation only", async () => {
    const s = await space("UTC")
    const created = await app("POST", "/devices", { name: "keyed", space: { id: s } })
    const readOnly = await app("POST", "/apiKeys", { name: "dashboard", readOnly: true })
    expect(readOnly.status).toBe(200)
    expect((await app("GET", `/energy/water?space.id=${s}&current=day`, undefined, readOnly.body.secretKey)).status).toBe(200)
    expect((await app("POST", "/energy/water/readings", [{ device: created.body.id, timestamp: 1, value: 1 }], readOnly.body.secretKey)).status).toBe(403)
    expect((await app("GET", `/energy/water?space.id=${s}`, undefined, created.body.secretKey)).status).toBe(403)
    expect((await t.call("GET", "/energy/water")).status).toBe(401)
  })
})
