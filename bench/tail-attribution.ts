/**
 * What a latency window's slow sends met inside their flight, from bench:ingest's dumps: the
 * broker's GC pauses and event-loop lags (`bench/loop-probe.ts`), read by `bench/latency-dump.ts`.
 * A pause or lag "inside" a send overlaps the time between its send and its delivery.
 */
import { percentile } from "./harness.ts"

/** One timed send: epoch ms when it was sent, ms until its delivery. */
export type Sample = readonly [sent: number, ms: number]

/** A stretch of time the broker spent on something: epoch ms at its start, its length in ms. */
export interface Stretch {
  readonly at: number
  readonly ms: number
  readonly kind: string
}

export interface LoopRecords {
  /** GC pauses that stop the main thread (scavenges and mark-compacts). */
  readonly pauses: ReadonlyArray<Stretch>
  /** The main thread's 1 ms timer fired late. */
  readonly lags: ReadonlyArray<Stretch>
}

/** Parses `bench/loop-probe.ts`'s lines; incremental marking and weak callbacks run beside the main thread, and are left out. */
export const parseLoopRecords = (text: string): LoopRecords => {
  const pauses: Array<Stretch> = []
  const lags: Array<Stretch> = []
  for (const line of text.split("\n")) {
    const [what, at, ms, kind] = line.split(" ")
    if (what === "gc" && (kind === "minor" || kind === "major")) pauses.push({ at: Number(at), ms: Number(ms), kind })
    else if (what === "lag") lags.push({ at: Number(at), ms: Number(ms), kind: "lag" })
  }
  return { pauses, lags }
}

/** Sorted by start; `within` answers whether any stretch overlaps [from, to) in O(log n) (stretches are short and rarely overlap each other). */
const index = (stretches: ReadonlyArray<Stretch>) => {
  const sorted = [...stretches].sort((a, b) => a.at - b.at)
  const longest = sorted.reduce((max, s) => Math.max(max, s.ms), 0)
  return (from: number, to: number): boolean => {
    // The first stretch that starts at or after `from - longest`: none before it can reach `from`.
    let lo = 0
    let hi = sorted.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (sorted[mid].at < from - longest) lo = mid + 1
      else hi = mid
    }
    for (let i = lo; i < sorted.length && sorted[i].at < to; i++) {
      if (sorted[i].at + sorted[i].ms > from) return true
    }
    return false
  }
}

export interface TailShare {
  readonly threshold: number
  readonly sends: number
  readonly withPause: number
  readonly withLag: number
  readonly withEither: number
}

export interface TailAttribution {
  /** The window's GC pauses and lags: count and total ms. */
  readonly pauses: { readonly count: number; readonly ms: number; readonly longest: number }
  readonly lags: { readonly count: number; readonly ms: number; readonly longest: number; readonly atLeast5: number }
  /** Sends at or above the p99 and the p90, and how many had a pause, a lag, either inside. */
  readonly p99: TailShare
  readonly p90: TailShare
  /** The same shares over every send: what chance alone would give. */
  readonly all: TailShare
  /** The p99 of the sends that had neither inside (undefined: none). */
  readonly p99Untouched: number | undefined
}

export const attributeTail = (samples: ReadonlyArray<Sample>, records: LoopRecords): TailAttribution => {
  if (samples.length === 0) throw new Error("no samples")
  const from = samples.reduce((min, s) => Math.min(min, s[0]), Infinity)
  const to = samples.reduce((max, s) => Math.max(max, s[0] + s[1]), -Infinity)
  const inWindow = (s: Stretch) => s.at + s.ms > from && s.at < to
  const pauses = records.pauses.filter(inWindow)
  const lags = records.lags.filter(inWindow)
  const pauseInside = index(pauses)
  const lagInside = index(lags)
  // What each send met, found once and read by every share below.
  const sends = samples.map(([sent, ms]) => ({ ms, pause: pauseInside(sent, sent + ms), lag: lagInside(sent, sent + ms) }))
  const share = (threshold: number): TailShare => {
    const tail = sends.filter((send) => send.ms >= threshold)
    return {
      threshold,
      sends: tail.length,
      withPause: tail.filter((send) => send.pause).length,
      withLag: tail.filter((send) => send.lag).length,
      withEither: tail.filter((send) => send.pause || send.lag).length
    }
  }
  const sorted = sends.map((send) => send.ms).sort((a, b) => a - b)
  const untouched = sends.filter((send) => !send.pause && !send.lag).map((send) => send.ms).sort((a, b) => a - b)
  const total = (list: ReadonlyArray<Stretch>) => list.reduce((sum, s) => sum + s.ms, 0)
  const longest = (list: ReadonlyArray<Stretch>) => list.reduce((max, s) => Math.max(max, s.ms), 0)
  return {
    pauses: { count: pauses.length, ms: total(pauses), longest: longest(pauses) },
    lags: { count: lags.length, ms: total(lags), longest: longest(lags), atLeast5: lags.filter((l) => l.ms >= 5).length },
    p99: share(percentile(sorted, 99)),
    p90: share(percentile(sorted, 90)),
    all: share(-Infinity),
    p99Untouched: untouched.length === 0 ? undefined : percentile(untouched, 99)
  }
}
