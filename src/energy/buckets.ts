import { DAY, floorDiv, HOUR, mod, type Zone } from "./zone.ts"

/**
 * Buckets of an energy series. Every bucket is `[start, next start)` on the time line; a
 * reading belongs to the one bucket whose range holds its timestamp.
 *
 * - `n minutes` / `n hours` are lengths of the local clock: a bucket starts wherever the
 *   clock of the zone shows a whole multiple of the interval counted from 1970-01-01 00:00
 *   local time (for intervals that divide a day: from every local midnight). Where the clock
 *   goes back, a wall time shown twice starts two buckets (25 hourly buckets that day);
 *   where it skips ahead, a skipped start is no start, so the bucket holding the jump is
 *   longer (a 2-hour bucket over New York's 02:00→03:00 lasts three hours).
 * - `n days`, `n weeks` (starting Monday) and `n months` start at local midnight, so they
 *   last 23 or 25 hours across daylight-saving changes. Multiples are counted from
 *   1970-01-01 (days), Monday 1970-01-05 (weeks) and January 1970 (months): `3 months` are
 *   calendar quarters, `2 weeks` fortnights fixed on the calendar.
 */
export type Unit = "minute" | "hour" | "day" | "week" | "month"

export interface Interval {
  readonly n: number
  readonly unit: Unit
}

export const UNITS: ReadonlyArray<Unit> = ["minute", "hour", "day", "week", "month"]

/** No bucket is longer than this many units (about 19 years of months). */
export const MAX_INTERVAL_COUNT = 10_000

/** `"15 minutes"`, `"1 hour"`, `"2 Days"` → Interval; else a message saying what is accepted. */
export const parseInterval = (text: string): Interval | string => {
  const match = /^\s*(\d+)\s+([A-Za-z]+)\s*$/.exec(text)
  if (match === null) return `must be a whole number, a space and a unit (minute, hour, day, week or month), e.g. "1 hour"; got ${JSON.stringify(text)}`
  const n = Number(match[1])
  const word = match[2].toLowerCase()
  const unit = UNITS.find((u) => word === u || word === `${u}s`)
  if (unit === undefined) return `unit must be minute, hour, day, week or month (singular or plural); got ${JSON.stringify(match[2])}`
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_INTERVAL_COUNT) return `must be from 1 to ${MAX_INTERVAL_COUNT} ${unit}s; got ${match[1]}`
  return { n, unit }
}

export const formatInterval = (interval: Interval): string => `${interval.n} ${interval.unit}${interval.n === 1 ? "" : "s"}`

/** The bucket grid of an interval in a zone. */
export interface Grid {
  /** The start of the bucket holding `t`. */
  start(t: number): number
  /** The start of the bucket after the one starting at `start`. */
  next(start: number): number
}

const FIRST_MONDAY = 4 // 1970-01-05 is day 4 of the epoch

/** Fixed lengths of the local clock (minutes, hours): starts where `wall(b) ≡ 0 (mod length)`. */
const clockGrid = (zone: Zone, length: number): Grid => ({
  start: (t) => {
    let x = t
    for (let guard = 0; guard < 10_000; guard++) {
      const piece = zone.pieceAt(x)
      const candidate = floorDiv(x + piece.offset, length) * length - piece.offset
      if (candidate >= piece.start) return candidate
      x = piece.start - 1
    }
    throw new Error(`no bucket start before ${t} in ${zone.name}`)
  },
  next: (start) => {
    let x = start + 1
    for (let guard = 0; guard < 10_000; guard++) {
      const piece = zone.pieceAt(x)
      const candidate = Math.ceil((x + piece.offset) / length) * length - piece.offset
      if (candidate < piece.end) return candidate
      x = piece.end
    }
    throw new Error(`no bucket start after ${start} in ${zone.name}`)
  }
})

/** Local calendar days since 1970-01-01 → the instant of that day's midnight. */
const midnight = (zone: Zone, day: number) => zone.instant(day * DAY)
const localDay = (zone: Zone, t: number) => floorDiv(zone.wall(t), DAY)

const dayGrid = (zone: Zone, days: number, anchor: number): Grid => {
  const align = (day: number) => day - mod(day - anchor, days)
  return {
    start: (t) => midnight(zone, align(localDay(zone, t))),
    next: (start) => midnight(zone, align(localDay(zone, start)) + days)
  }
}

const monthIndex = (zone: Zone, t: number) => {
  const date = new Date(zone.wall(t))
  return (date.getUTCFullYear() - 1970) * 12 + date.getUTCMonth()
}
const monthStart = (zone: Zone, index: number) =>
  zone.instant(Date.UTC(1970 + floorDiv(index, 12), mod(index, 12), 1))

const monthGrid = (zone: Zone, months: number): Grid => {
  const align = (index: number) => index - mod(index, months)
  return {
    start: (t) => monthStart(zone, align(monthIndex(zone, t))),
    next: (start) => monthStart(zone, align(monthIndex(zone, start)) + months)
  }
}

export const gridOf = (interval: Interval, zone: Zone): Grid => {
  switch (interval.unit) {
    case "minute":
      return clockGrid(zone, interval.n * 60_000)
    case "hour":
      return clockGrid(zone, interval.n * HOUR)
    case "day":
      return dayGrid(zone, interval.n, 0)
    case "week":
      return dayGrid(zone, interval.n * 7, FIRST_MONDAY)
    case "month":
      return monthGrid(zone, interval.n)
  }
}

export type Period = "hour" | "day" | "week" | "month" | "year"
export const PERIODS: ReadonlyArray<Period> = ["hour", "day", "week", "month", "year"]

const periodGrid = (period: Period, zone: Zone): Grid =>
  period === "year" ? monthGrid(zone, 12) : gridOf({ n: 1, unit: period }, zone)

/** `current=day`: the local day holding `now`; `previous=day`: the one before it. `[since, until)`. */
export const periodRange = (period: Period, which: "current" | "previous", zone: Zone, now: number): { since: number; until: number } => {
  const grid = periodGrid(period, zone)
  const start = grid.start(now)
  if (which === "current") return { since: start, until: grid.next(start) }
  return { since: grid.start(start - 1), until: start }
}

/**
 * The buckets from the one holding `from` up to `until` (exclusive), at most `limit` of them,
 * each clipped to `[from, until)`. `more` tells whether buckets remain after the last one.
 */
export const bucketsOf = (
  grid: Grid,
  from: number,
  until: number,
  limit: number
): { buckets: Array<{ start: number; lo: number; hi: number }>; more: boolean } => {
  const buckets: Array<{ start: number; lo: number; hi: number }> = []
  if (from >= until) return { buckets, more: false }
  let start = grid.start(from)
  while (start < until && buckets.length < limit) {
    const next = grid.next(start)
    buckets.push({ start, lo: Math.max(start, from), hi: Math.min(next, until) })
    start = next
  }
  return { buckets, more: start < until }
}
