/**
 * Rounds of a benchmark's tail cases: with BENCH_ROUNDS (or a repeated BENCH_TARGETS), every
 * target runs a case several times, the targets taking turns, so that each run of Voltaic has
 * runs of its peers close to it in time. A p99 of one 20 s window on a shared 2-core machine is
 * one draw: the same code measured 10.9 and 7.2 ms in one run (bench/RESULTS.md, session 37),
 * and four runs of one configuration 43 to 94 ms on session 38's machine. A verdict then takes the median over the
 * rounds, and a ratio the median of each round's own ratio (a run against its peer of the same
 * round), which a round the machine disturbed moves least.
 */

/** The median; the mean of the middle two for an even count, NaN for none. */
export const median = (values: ReadonlyArray<number>): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const middle = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/** The round of `run` among `runs`: how many runs of the same kind (`same`) came before it. */
export const roundOf = <T>(runs: ReadonlyArray<T>, run: T, same: (a: T, b: T) => boolean): number => {
  let round = 0
  for (const other of runs) {
    if (other === run) return round
    if (same(other, run)) round += 1
  }
  throw new Error("roundOf: the run is not among the runs")
}

/**
 * The peer's run to set beside a run of round `round`: the peer's run of the same round, or,
 * when the peer ran fewer rounds, its first (as a single run of it is compared with every run).
 */
export const peerInRound = <T>(peerRuns: ReadonlyArray<T>, round: number): T | undefined => peerRuns[round] ?? peerRuns[0]

/** What a verdict over rounds reads: the median of our values, of theirs, and of each round's ratio. */
export interface RoundsSummary {
  readonly rounds: number
  readonly ours: number
  readonly theirs: number
  /** Each round's ratio, ours over theirs, for the rounds both ran (a single run of theirs stands for every round). */
  readonly ratios: ReadonlyArray<number>
  readonly ratio: number
}

export const summarizeRounds = (ours: ReadonlyArray<number>, theirs: ReadonlyArray<number>): RoundsSummary => {
  const ratios = ours.flatMap((value, round) => {
    const peer = peerInRound(theirs, round)
    return peer === undefined ? [] : [value / peer]
  })
  return { rounds: ours.length, ours: median(ours), theirs: median(theirs), ratios, ratio: median(ratios) }
}

/** ", the median of 12.1 / 9.8 / 20.0" for several values, "" for one. */
export const medianOfText = (values: ReadonlyArray<number>, format: (v: number) => string): string =>
  values.length > 1 ? `, the median of ${values.map(format).join(" / ")}` : ""

/** "; the median of the rounds' ×1.40 / ×1.54 / ×2.10" for several ratios, "" for one. */
export const ratiosText = (ratios: ReadonlyArray<number>): string =>
  ratios.length > 1 ? `; the median of the rounds' ${ratios.map((r) => `×${r.toFixed(2)}`).join(" / ")}` : ""

/** Runs of the same target are rounds of one another. */
export const sameTarget = (a: { readonly target: string }, b: { readonly target: string }): boolean => a.target === b.target
