import { describe, expect, it } from "vitest"
import { median, medianOfText, peerInRound, ratiosText, roundOf, sameTarget, summarizeRounds } from "../../bench/rounds.ts"

describe("bench rounds (bench:ingest's BENCH_ROUNDS)", () => {
  it("takes the median, the mean of the middle two for an even count, NaN for none", () => {
    expect(median([9, 1, 5])).toBe(5)
    expect(median([4, 1, 3, 2])).toBe(2.5)
    expect(median([7])).toBe(7)
    expect(median([])).toBeNaN()
  })

  it("numbers each run by the runs of the same target before it", () => {
    const runs = [{ target: "bare aedes" }, { target: "Postgres" }, { target: "bare aedes" }, { target: "Postgres" }, { target: "Postgres" }]
    expect(runs.map((r) => roundOf(runs, r, sameTarget))).toEqual([0, 0, 1, 1, 2])
    expect(() => roundOf(runs, { target: "Postgres" }, sameTarget)).toThrow(/not among/)
  })

  it("sets a run beside its peer's run of the same round, or the peer's only run", () => {
    expect(peerInRound(["a0", "a1", "a2"], 1)).toBe("a1")
    expect(peerInRound(["a0"], 2)).toBe("a0")
    expect(peerInRound([], 0)).toBeUndefined()
  })

  it("takes a ratio over rounds as the median of each round's own ratio, not the ratio of the medians", () => {
    // Round 2 was disturbed for both: its ratio is ordinary, while its values are not.
    const summary = summarizeRounds([10, 40, 12], [5, 30, 4])
    expect(summary.rounds).toBe(3)
    expect(summary.ours).toBe(12)
    expect(summary.theirs).toBe(5)
    expect(summary.ratios).toEqual([2, 40 / 30, 3])
    expect(summary.ratio).toBe(2)
    // A single peer run stands for every round.
    expect(summarizeRounds([6, 9], [3]).ratios).toEqual([2, 3])
    expect(summarizeRounds([6], []).ratio).toBeNaN()
  })

  it("lists the rounds only when there are several", () => {
    expect(medianOfText([12.1, 9.8, 20], (v) => v.toFixed(1))).toBe(", the median of 12.1 / 9.8 / 20.0")
    expect(medianOfText([12.1], (v) => v.toFixed(1))).toBe("")
    expect(ratiosText([1.4, 1.54, 2.1])).toBe("; the median of the rounds' ×1.40 / ×1.54 / ×2.10")
    expect(ratiosText([1.4])).toBe("")
  })
})
