import { DAY, HOUR } from "./zone.ts"

/**
 * Which stored level answers which part of a query. Rollups are kept per UTC hour and per
 * UTC day (`energy_hourly`, `energy_daily`), so they are exact for any range made of whole
 * UTC hours or days. Each bucket (already clipped to `[since, until)`) is cut into:
 *
 *   raw head │ hourly head │ whole UTC days │ hourly tail │ raw tail
 *
 * - In UTC, and in any zone whose offset is a whole number of hours (Europe/Dublin,
 *   America/New_York…), hourly and longer buckets start on UTC hours: no raw parts at all.
 * - A local day lines up with a UTC day only where the offset is 0 at both of its ends
 *   (Dublin in winter); elsewhere (Dublin in summer, New York) a day is read from its 23,
 *   24 or 25 hourly rows, a month from ~730 of them — still far fewer than raw readings.
 * - Zones with 30- or 45-minute offsets (Asia/Kolkata, Australia/Adelaide, Asia/Kathmandu)
 *   read the part of each bucket before the first and after the last whole UTC hour from raw
 *   readings; sub-hour buckets (15 minutes) are raw everywhere.
 *
 * Device series have no hourly rollup: for a meter reporting hourly or less often it would
 * repeat every raw reading and cost the bulk import about half its time; their raw readings,
 * indexed by series and time, serve that level, and their daily rollups longer ranges. An index
 * carrying the quantity (`INCLUDE`) made a device's hourly day 0.69× at 100M readings but raw
 * readings 1.48× the disk (bench/RESULTS.md, 100M): not shipped.
 *
 * Adjacent ranges of one level are merged into runs, each one index range scan per series.
 */
export type Level = "raw" | "hourly" | "daily"

export type Runs = Record<Level, Array<[number, number]>>

const ceilTo = (t: number, step: number) => Math.ceil(t / step) * step
const floorTo = (t: number, step: number) => Math.floor(t / step) * step

const push = (runs: Array<[number, number]>, lo: number, hi: number) => {
  if (lo >= hi) return
  const last = runs[runs.length - 1]
  if (last !== undefined && last[1] === lo) last[1] = hi
  else runs.push([lo, hi])
}

/** The rollups a query may read: device series have daily rollups only. */
export interface Rollups {
  readonly hourly: boolean
  readonly daily: boolean
}

export const NO_ROLLUPS: Rollups = { hourly: false, daily: false }

/**
 * The runs of each level covering `ranges` (ascending, non-overlapping) exactly once.
 * Without rollups everything is read from raw readings (the benchmark's and the property
 * test's reference).
 */
export const planRuns = (ranges: ReadonlyArray<{ lo: number; hi: number }>, rollups: Rollups): Runs => {
  const runs: Runs = { raw: [], hourly: [], daily: [] }
  const hourly = (lo: number, hi: number) => {
    const from = ceilTo(lo, HOUR)
    const to = floorTo(hi, HOUR)
    if (!rollups.hourly || from >= to) return push(runs.raw, lo, hi)
    push(runs.raw, lo, from)
    push(runs.hourly, from, to)
    push(runs.raw, to, hi)
  }
  for (const { lo, hi } of ranges) {
    const from = ceilTo(lo, DAY)
    const to = floorTo(hi, DAY)
    if (!rollups.daily || from >= to) {
      hourly(lo, hi)
      continue
    }
    hourly(lo, from)
    push(runs.daily, from, to)
    hourly(to, hi)
  }
  return runs
}
