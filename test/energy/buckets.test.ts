import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { bucketsOf, gridOf, type Interval, parseInterval, periodRange } from "../../src/energy/buckets.ts"
import { addDecimal, formatDecimal, parseDecimal, subtractDecimal } from "../../src/energy/decimal.ts"
import { meterDelta } from "../../src/energy/meter.ts"
import { planRuns, type Rollups, type Runs } from "../../src/energy/plan.ts"
import { Zone } from "../../src/energy/zone.ts"

const at = (iso: string) => Date.parse(iso)
const zone = (name: string) => {
  const z = Zone.of(name)
  if (z === undefined) throw new Error(name)
  return z
}
/** Bucket starts of `[since, until)` as ISO strings. */
const starts = (interval: string, tz: string, since: string, until: string) => {
  const parsed = parseInterval(interval) as Interval
  return bucketsOf(gridOf(parsed, zone(tz)), at(since), at(until), 10_000).buckets.map((b) => new Date(b.start).toISOString())
}
const hours = (a: string, b: string) => (at(b) - at(a)) / 3_600_000

describe("intervals", () => {
  it("reads a whole number, whitespace and a unit, singular or plural", () => {
    expect(parseInterval("15 minutes")).toEqual({ n: 15, unit: "minute" })
    expect(parseInterval("1 hour")).toEqual({ n: 1, unit: "hour" })
    expect(parseInterval(" 2\tHours ")).toEqual({ n: 2, unit: "hour" })
    expect(parseInterval("1 day")).toEqual({ n: 1, unit: "day" })
    expect(parseInterval("3 weeks")).toEqual({ n: 3, unit: "week" })
    expect(parseInterval("12 months")).toEqual({ n: 12, unit: "month" })
  })

  it("refuses zero, unknown units and malformed text with a message", () => {
    for (const bad of ["0 hours", "3 fortnights", "1hour", "hour", "1.5 hours", "-1 hour", "", "1 hour 2 minutes", "10001 days"]) {
      expect(typeof parseInterval(bad), bad).toBe("string")
    }
    expect(parseInterval("3 fortnights")).toMatch(/minute, hour, day, week or month/)
  })
})

describe("time zones", () => {
  it("knows the offsets of Dublin and New York either side of their changes", () => {
    const dublin = zone("Europe/Dublin")
    expect(dublin.offsetAt(at("2025-03-30T00:59:59Z"))).toBe(0)
    expect(dublin.offsetAt(at("2025-03-30T01:00:00Z"))).toBe(3_600_000)
    expect(dublin.offsetAt(at("2025-10-26T00:59:59Z"))).toBe(3_600_000)
    expect(dublin.offsetAt(at("2025-10-26T01:00:00Z"))).toBe(0)
    const newYork = zone("America/New_York")
    expect(newYork.offsetAt(at("2025-03-09T06:59:59Z"))).toBe(-5 * 3_600_000)
    expect(newYork.offsetAt(at("2025-03-09T07:00:00Z"))).toBe(-4 * 3_600_000)
    expect(zone("Asia/Kathmandu").offsetAt(at("2025-06-01T00:00:00Z"))).toBe(5.75 * 3_600_000)
    expect(Zone.of("Mars/Olympus_Mons")).toBeUndefined()
  })

  it("names the earlier instant of a repeated wall time and skips forward over a gap", () => {
    const newYork = zone("America/New_York")
    // 01:30 on 2 November 2025 happens twice: EDT first.
    expect(new Date(newYork.instant(at("2025-11-02T01:30:00Z"))).toISOString()).toBe("2025-11-02T05:30:00.000Z")
    // 02:30 on 9 March 2025 never happens: taken as 03:30 EDT.
    expect(new Date(newYork.instant(at("2025-03-09T02:30:00Z"))).toISOString()).toBe("2025-03-09T07:30:00.000Z")
  })
})

describe("buckets", () => {
  it("cuts 15 minutes on the quarter hours of the local clock", () => {
    expect(starts("15 minutes", "UTC", "2025-01-01T10:05:00Z", "2025-01-01T11:00:00Z")).toEqual([
      "2025-01-01T10:00:00.000Z", "2025-01-01T10:15:00.000Z", "2025-01-01T10:30:00.000Z", "2025-01-01T10:45:00.000Z"
    ])
    // India is 5:30 ahead: quarter hours fall on :00/:15/:30/:45 of UTC too, hours on :30.
    expect(starts("1 hour", "Asia/Kolkata", "2025-01-01T00:00:00Z", "2025-01-01T02:00:00Z")).toEqual([
      "2024-12-31T23:30:00.000Z", "2025-01-01T00:30:00.000Z", "2025-01-01T01:30:00.000Z"
    ])
  })

  it("cuts 2 hours from local midnight, lengthening the bucket that holds a skipped hour", () => {
    expect(starts("2 hours", "UTC", "2025-01-01T00:00:00Z", "2025-01-01T06:00:00Z")).toEqual([
      "2025-01-01T00:00:00.000Z", "2025-01-01T02:00:00.000Z", "2025-01-01T04:00:00.000Z"
    ])
    // New York, 9 March 2025: 02:00 EST never shows, so 00:00–04:00 EDT is one 3-hour bucket.
    expect(starts("2 hours", "America/New_York", "2025-03-09T05:00:00Z", "2025-03-09T12:00:00Z")).toEqual([
      "2025-03-09T05:00:00.000Z", "2025-03-09T08:00:00.000Z", "2025-03-09T10:00:00.000Z"
    ])
  })

  it("gives a Dublin day of 23 hours in March and 25 in October, and as many hourly buckets", () => {
    expect(starts("1 day", "Europe/Dublin", "2025-03-29T00:00:00Z", "2025-04-01T00:00:00Z")).toEqual([
      "2025-03-29T00:00:00.000Z", "2025-03-30T00:00:00.000Z", "2025-03-30T23:00:00.000Z", "2025-03-31T23:00:00.000Z"
    ])
    expect(hours("2025-03-30T00:00:00Z", "2025-03-30T23:00:00Z")).toBe(23)
    expect(starts("1 day", "Europe/Dublin", "2025-10-25T00:00:00Z", "2025-10-28T00:00:00Z")).toEqual([
      "2025-10-24T23:00:00.000Z", "2025-10-25T23:00:00.000Z", "2025-10-27T00:00:00.000Z"
    ])
    expect(hours("2025-10-25T23:00:00Z", "2025-10-27T00:00:00Z")).toBe(25)
    expect(starts("1 hour", "Europe/Dublin", "2025-03-30T00:00:00Z", "2025-03-30T23:00:00Z")).toHaveLength(23)
    expect(starts("1 hour", "Europe/Dublin", "2025-10-25T23:00:00Z", "2025-10-27T00:00:00Z")).toHaveLength(25)
  })

  it("gives a New York day of 23 hours in March and 25 in November", () => {
    expect(starts("1 day", "America/New_York", "2025-03-09T05:00:00Z", "2025-03-11T04:00:00Z")).toEqual([
      "2025-03-09T05:00:00.000Z", "2025-03-10T04:00:00.000Z"
    ])
    expect(starts("1 day", "America/New_York", "2025-11-02T04:00:00Z", "2025-11-04T05:00:00Z")).toEqual([
      "2025-11-02T04:00:00.000Z", "2025-11-03T05:00:00.000Z"
    ])
    expect(starts("1 hour", "America/New_York", "2025-11-02T04:00:00Z", "2025-11-03T05:00:00Z")).toHaveLength(25)
  })

  it("starts weeks on Monday at local midnight and months on the first", () => {
    expect(starts("1 week", "UTC", "2025-03-02T00:00:00Z", "2025-03-17T00:00:00Z")).toEqual([
      "2025-02-24T00:00:00.000Z", "2025-03-03T00:00:00.000Z", "2025-03-10T00:00:00.000Z"
    ])
    // The week of 24 March 2025 in Dublin holds the change to summer time: 167 hours.
    expect(starts("1 week", "Europe/Dublin", "2025-03-24T00:00:00Z", "2025-04-01T00:00:00Z")).toEqual([
      "2025-03-24T00:00:00.000Z", "2025-03-30T23:00:00.000Z"
    ])
    expect(starts("1 month", "Europe/Dublin", "2025-03-01T00:00:00Z", "2025-05-01T00:00:00Z")).toEqual([
      "2025-03-01T00:00:00.000Z", "2025-03-31T23:00:00.000Z", "2025-04-30T23:00:00.000Z"
    ])
    expect(starts("3 months", "UTC", "2025-02-10T00:00:00Z", "2025-08-01T00:00:00Z")).toEqual([
      "2025-01-01T00:00:00.000Z", "2025-04-01T00:00:00.000Z", "2025-07-01T00:00:00.000Z"
    ])
  })

  it("stops at the limit and says more buckets remain", () => {
    const grid = gridOf({ n: 1, unit: "hour" }, zone("UTC"))
    const page = bucketsOf(grid, at("2025-01-01T00:00:00Z"), at("2025-01-02T00:00:00Z"), 10)
    expect(page.buckets).toHaveLength(10)
    expect(page.more).toBe(true)
    expect(bucketsOf(grid, at("2025-01-01T14:00:00Z"), at("2025-01-02T00:00:00Z"), 10).more).toBe(false)
  })
})

describe("periods", () => {
  const now = at("2025-10-26T12:34:56Z") // a Sunday; Dublin went back an hour at 01:00 UTC
  const range = (period: "hour" | "day" | "week" | "month" | "year", which: "current" | "previous", tz: string) => {
    const r = periodRange(period, which, zone(tz), now)
    return [new Date(r.since).toISOString(), new Date(r.until).toISOString()]
  }

  it("aligns current and previous periods in the zone", () => {
    expect(range("day", "current", "Europe/Dublin")).toEqual(["2025-10-25T23:00:00.000Z", "2025-10-27T00:00:00.000Z"])
    expect(range("day", "previous", "Europe/Dublin")).toEqual(["2025-10-24T23:00:00.000Z", "2025-10-25T23:00:00.000Z"])
    expect(range("hour", "current", "Asia/Kolkata")).toEqual(["2025-10-26T12:30:00.000Z", "2025-10-26T13:30:00.000Z"])
    expect(range("week", "current", "UTC")).toEqual(["2025-10-20T00:00:00.000Z", "2025-10-27T00:00:00.000Z"])
    expect(range("week", "previous", "America/New_York")).toEqual(["2025-10-13T04:00:00.000Z", "2025-10-20T04:00:00.000Z"])
    expect(range("month", "previous", "Europe/Dublin")).toEqual(["2025-08-31T23:00:00.000Z", "2025-09-30T23:00:00.000Z"])
    expect(range("year", "current", "America/New_York")).toEqual(["2025-01-01T05:00:00.000Z", "2026-01-01T05:00:00.000Z"])
  })
})

describe("the rollup plan", () => {
  const H = 3_600_000
  const D = 24 * H
  it("reads whole UTC days from daily rollups, whole hours from hourly ones and the rest raw", () => {
    const lo = at("2025-01-01T05:30:00Z")
    const hi = at("2025-01-04T02:45:00Z")
    const runs = planRuns([{ lo, hi }], { hourly: true, daily: true })
    expect(runs.daily).toEqual([[at("2025-01-02T00:00:00Z"), at("2025-01-04T00:00:00Z")]])
    expect(runs.hourly).toEqual([[lo + 30 * 60_000, at("2025-01-02T00:00:00Z")], [at("2025-01-04T00:00:00Z"), at("2025-01-04T02:00:00Z")]])
    expect(runs.raw).toEqual([[lo, lo + 30 * 60_000], [at("2025-01-04T02:00:00Z"), hi]])
  })

  it("merges neighbouring buckets into one run per level, and reads devices' hours raw", () => {
    const buckets = [0, 1, 2].map((i) => ({ lo: i * D - H, hi: (i + 1) * D - H }))
    expect(planRuns(buckets, { hourly: true, daily: true })).toEqual({ raw: [], hourly: [[-H, 3 * D - H]], daily: [] })
    expect(planRuns(buckets, { hourly: false, daily: true }).raw).toEqual([[-H, 3 * D - H]])
    expect(planRuns([{ lo: 0, hi: 2 * D }], { hourly: false, daily: false })).toEqual({ raw: [[0, 2 * D]], hourly: [], daily: [] })
  })
})

describe("the rollup plan, for any buckets of any zone", () => {
  const H = 3_600_000
  const D = 24 * H
  const ZONES = ["UTC", "Europe/Dublin", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Adelaide", "Pacific/Chatham"]
  const INTERVALS = ["1 minute", "7 minutes", "15 minutes", "1 hour", "2 hours", "3 hours", "1 day", "2 days", "1 week", "1 month"]
  const ROLLUPS: ReadonlyArray<Rollups> = [
    { hourly: false, daily: false },
    { hourly: false, daily: true },
    { hourly: true, daily: false },
    { hourly: true, daily: true }
  ]
  /** Ascending, non-overlapping intervals → the same set as ascending, merged intervals. */
  const merged = (intervals: ReadonlyArray<readonly [number, number]>) => {
    const out: Array<[number, number]> = []
    for (const [lo, hi] of [...intervals].sort((a, b) => a[0] - b[0])) {
      const last = out[out.length - 1]
      if (last !== undefined && last[1] === lo) last[1] = hi
      else out.push([lo, hi])
    }
    return out
  }
  const all = (runs: Runs) => [...runs.raw, ...runs.hourly, ...runs.daily]
  /** Whether `[lo, hi)` holds a whole step `[k·step, (k+1)·step)`. */
  const holdsWhole = (lo: number, hi: number, step: number) => Math.ceil(lo / step) * step + step <= hi

  const buckets = fc.record({
    zone: fc.constantFrom(...ZONES),
    interval: fc.constantFrom(...INTERVALS),
    since: fc.integer({ min: Date.UTC(2024, 0, 1), max: Date.UTC(2026, 0, 1) }),
    minutes: fc.integer({ min: 1, max: 120 * 24 * 60 }),
    limit: fc.integer({ min: 1, max: 400 })
  }).map(({ zone: name, interval, since, minutes, limit }) =>
    bucketsOf(gridOf(parseInterval(interval) as Interval, zone(name)), since, since + minutes * 60_000, limit).buckets
  )

  it("covers every bucket exactly once, each rollup level only over whole UTC hours or days, and only where allowed", () => {
    fc.assert(fc.property(buckets, fc.constantFrom(...ROLLUPS), (ranges, rollups) => {
      const runs = planRuns(ranges, rollups)
      const sorted = [...all(runs)].sort((a, b) => a[0] - b[0])
      for (let i = 1; i < sorted.length; i++) expect(sorted[i][0]).toBeGreaterThanOrEqual(sorted[i - 1][1])
      for (const [lo, hi] of sorted) expect(lo).toBeLessThan(hi)
      expect(merged(sorted)).toEqual(merged(ranges.map((r) => [r.lo, r.hi] as const)))
      for (const [lo, hi] of runs.hourly) expect([lo % H, hi % H]).toEqual([0, 0])
      for (const [lo, hi] of runs.daily) expect([lo % D, hi % D]).toEqual([0, 0])
      if (!rollups.hourly) expect(runs.hourly).toEqual([])
      if (!rollups.daily) expect(runs.daily).toEqual([])
    }), { numRuns: 400, seed: 20_261_122 })
  })

  it("reads raw only what no allowed rollup holds whole, and hourly rows only where no whole UTC day fits", () => {
    fc.assert(fc.property(buckets, fc.constantFrom(...ROLLUPS), (ranges, rollups) => {
      for (const range of ranges) {
        const runs = planRuns([range], rollups)
        // Each bucket's own plan: its raw parts hold no whole UTC hour (hourly allowed) nor day (daily allowed)…
        for (const [lo, hi] of runs.raw) {
          if (rollups.hourly) expect(holdsWhole(lo, hi, H)).toBe(false)
          if (rollups.daily) expect(holdsWhole(lo, hi, D)).toBe(false)
        }
        // …and its hourly parts no whole UTC day when daily rows may answer it.
        if (rollups.daily) for (const [lo, hi] of runs.hourly) expect(holdsWhole(lo, hi, D)).toBe(false)
      }
      // The plan of all the buckets is theirs, neighbours of one level merged.
      const each = ranges.map((r) => planRuns([r], rollups))
      const together = planRuns(ranges, rollups)
      for (const level of ["raw", "hourly", "daily"] as const) {
        expect(together[level]).toEqual(merged(each.flatMap((r) => r[level])))
      }
    }), { numRuns: 400, seed: 20_261_123 })
  })
})

describe("meters and decimals", () => {
  const d = (text: string) => parseDecimal(text)!
  const delta = (previous: string | undefined, current: string) => {
    const result = meterDelta(previous === undefined ? undefined : d(previous), d(current))
    return result === undefined ? undefined : formatDecimal(result)
  }

  it("turns register values into consumption, the first setting the baseline and a decrease a reset", () => {
    expect(delta(undefined, "100")).toBeUndefined()
    expect(delta("100", "100.5")).toBe("0.5")
    expect(delta("123456.5", "123456.789")).toBe("0.289")
    expect(delta("100.5", "100.5")).toBe("0")
    expect(delta("102", "1.25")).toBe("1.25")
  })

  it("adds and subtracts exactly", () => {
    expect(formatDecimal(addDecimal(d("0.1"), d("0.2")))).toBe("0.3")
    expect(formatDecimal(subtractDecimal(d("1"), d("1.000001")))).toBe("-0.000001")
    expect(formatDecimal(parseDecimal(1e-7)!)).toBe("0.0000001")
    expect(formatDecimal(parseDecimal(1e21)!)).toBe("1000000000000000000000")
    expect(parseDecimal("1.5.2")).toBeUndefined()
  })
})
