/**
 * UTC offsets of IANA time zones from the runtime's tz database (`Intl`), as constant-offset
 * pieces of the time line. Everything here is in epoch milliseconds; a "wall" time is the
 * local clock reading expressed as if it were UTC (`instant + offset`).
 */

export const HOUR = 3_600_000
export const DAY = 86_400_000

/** A stretch of time with one UTC offset: `[start, end)`. */
export interface Piece {
  readonly start: number
  readonly end: number
  readonly offset: number
}

/** Sampling step when looking for offset changes: no zone changes twice within six hours. */
const SAMPLE = 6 * HOUR

export const floorDiv = (a: number, b: number): number => Math.floor(a / b)
export const mod = (a: number, b: number): number => ((a % b) + b) % b

const yearStart = (year: number) => Date.UTC(year, 0, 1)

export class Zone {
  private readonly format: Intl.DateTimeFormat | undefined
  /** Per calendar year (UTC): the pieces covering it, clipped to the year. */
  private readonly years = new Map<number, ReadonlyArray<Piece>>()

  private constructor(readonly name: string) {
    this.format = name === "UTC" ? undefined : new Intl.DateTimeFormat("en-US", {
      timeZone: name,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric"
    })
  }

  private static readonly cache = new Map<string, Zone>()

  /** The zone of an IANA name, or undefined when the runtime does not know it. */
  static of(name: string): Zone | undefined {
    const cached = Zone.cache.get(name)
    if (cached !== undefined) return cached
    let zone: Zone
    try {
      zone = new Zone(name)
    } catch {
      return undefined
    }
    // Canonical spellings share one entry; the cache holds at most the zones in use.
    if (Zone.cache.size > 1_000) Zone.cache.clear()
    Zone.cache.set(name, zone)
    return zone
  }

  /** The offset at `t`, measured from `Intl` (whole seconds). */
  private measure(t: number): number {
    if (this.format === undefined) return 0
    const second = t - mod(t, 1000)
    const parts = this.format.formatToParts(second)
    const get = (type: Intl.DateTimeFormatPartTypes) => Number(parts.find((p) => p.type === type)?.value)
    const wall = Date.UTC(get("year"), get("month") - 1, get("day"), get("hour"), get("minute"), get("second"))
    return wall - second
  }

  private piecesOfYear(year: number): ReadonlyArray<Piece> {
    const cached = this.years.get(year)
    if (cached !== undefined) return cached
    const from = yearStart(year)
    const to = yearStart(year + 1)
    const pieces: Array<Piece> = []
    let start = from
    let offset = this.measure(from)
    for (let t = from; t < to;) {
      const next = Math.min(t + SAMPLE, to)
      const after = this.measure(next)
      if (after !== offset) {
        // The change lies in (t, next]: bisect to the second.
        let lo = t
        let hi = next
        while (hi - lo > 1000) {
          const mid = lo + Math.floor((hi - lo) / 2000) * 1000
          if (this.measure(mid) === offset) lo = mid
          else hi = mid
        }
        pieces.push({ start, end: hi, offset })
        start = hi
        offset = this.measure(hi)
        t = hi
        continue
      }
      t = next
    }
    if (start < to) pieces.push({ start, end: to, offset })
    this.years.set(year, pieces)
    return pieces
  }

  /** The piece holding `t`. */
  pieceAt(t: number): Piece {
    if (this.format === undefined) return { start: -8.64e15, end: 8.64e15, offset: 0 }
    const pieces = this.piecesOfYear(new Date(t).getUTCFullYear())
    for (const piece of pieces) if (t < piece.end) return piece
    return pieces[pieces.length - 1]
  }

  offsetAt(t: number): number {
    return this.pieceAt(t).offset
  }

  /** The local clock reading at `t`, as a UTC epoch. */
  wall(t: number): number {
    return t + this.offsetAt(t)
  }

  /**
   * The instant a local clock reading names. A reading shown twice (clocks going back)
   * names the earlier instant; one skipped (clocks going forward) names the instant the
   * clock jumped past it, shifted forward by the gap — Temporal's "compatible" rule.
   */
  instant(wall: number): number {
    const before = this.offsetAt(wall - DAY)
    const after = this.offsetAt(wall + DAY)
    let best: number | undefined
    for (const offset of before === after ? [before] : [before, after]) {
      const t = wall - offset
      if (this.offsetAt(t) === offset && (best === undefined || t < best)) best = t
    }
    return best ?? wall - before
  }
}
