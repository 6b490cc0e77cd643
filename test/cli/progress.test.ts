import { describe, expect, it } from "vitest"
import { formatDuration, makeProgress } from "../../src/cli/progress.ts"

/** A stream that records what is written, on a clock the test steps. */
const recorder = (isTTY: boolean) => {
  const written: Array<string> = []
  let clock = 0
  return { out: { isTTY, columns: 100, write: (text: string) => written.push(text) }, written, now: () => clock, advance: (ms: number) => (clock += ms) }
}

describe("the progress of a long command", () => {
  it("redraws one terminal line in place with a bar, done of total, the rate and the time left", () => {
    const r = recorder(true)
    const progress = makeProgress(r.out, { label: "importing", total: 120_000, unit: "rows", now: r.now })
    progress.update(1_000)
    expect(r.written).toEqual([]) // not yet 100 ms
    r.advance(1_000)
    progress.update(30_000)
    expect(r.written).toHaveLength(1)
    expect(r.written[0]).toMatch(/^\rimporting █+░+ 30,000\/120,000 rows \(25%\), 30,000 rows\/s, 3s left\x1b\[K$/)
    r.advance(50)
    progress.update(31_000)
    expect(r.written).toHaveLength(1) // at most one drawing per 100 ms
    r.advance(2_950)
    progress.update(120_000)
    progress.finish()
    expect(r.written.at(-2)).toMatch(/120,000\/120,000 rows \(100%\), 30,000 rows\/s\x1b\[K$/)
    expect(r.written.at(-2)).not.toContain("░")
    expect(r.written.at(-1)).toBe("\n")
  })

  it("writes a plain line every 2 s elsewhere, and nothing on finishing", () => {
    const r = recorder(false)
    const progress = makeProgress(r.out, { label: "checking", total: 40_000_000, unit: "bytes", now: r.now })
    r.advance(1_000)
    progress.update(10_000_000)
    expect(r.written).toEqual([])
    r.advance(1_000)
    progress.update(20_000_000)
    expect(r.written).toEqual(["checking: 20.0 MB of 40.0 MB (50%), 10.0 MB/s, 2s left\n"])
    progress.finish()
    expect(r.written).toHaveLength(1)
  })

  it("says time left in seconds, minutes or hours", () => {
    expect([formatDuration(45.4), formatDuration(185), formatDuration(7_380)]).toEqual(["45s", "3m05s", "2h03m"])
  })
})
