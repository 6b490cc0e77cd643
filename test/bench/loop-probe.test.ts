import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { afterEach, describe, expect, it } from "vitest"
import { attributeTail, parseLoopRecords, type Sample } from "../../bench/tail-attribution.ts"

/** bench:ingest's loop probe and what latency-dump.ts reads from it: a pause misplaced is a tail misexplained. */

const root = resolve(import.meta.dirname, "../..")
/** tsx's loader by path: the inert case runs in an empty directory, where `--import tsx` would not resolve. */
const tsx = pathToFileURL(join(root, "node_modules/tsx/dist/loader.mjs")).href

describe("bench/loop-probe.ts", () => {
  const dirs: Array<string> = []
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
  })

  const run = (env: NodeJS.ProcessEnv, cwd = root) => {
    // Blocks its event loop for 40 ms, then runs a full GC, then exits.
    const script = "setTimeout(() => { const end = performance.now() + 40; while (performance.now() < end); " +
      "setTimeout(() => { globalThis.gc(); setTimeout(() => console.log('done'), 20) }, 10) }, 50)"
    return execFileSync(process.execPath, ["--expose-gc", "--import", tsx, "--import", join(root, "bench/loop-probe.ts"), "-e", script], {
      cwd,
      env: { ...process.env, ...env },
      encoding: "utf8",
      timeout: 20_000
    })
  }

  it("writes the main thread's lags and the GC pauses, with epoch times, when given a file", () => {
    const dir = mkdtempSync(join(tmpdir(), "voltaic-loop-probe-"))
    dirs.push(dir)
    const file = join(dir, "loop.txt")
    // What an earlier broker of the same name left is not read as this one's.
    writeFileSync(file, "lag 1000.0 50.00\n")
    const before = Date.now()
    run({ BENCH_LOOP_PROBE_FILE: file })
    const after = Date.now()
    const records = parseLoopRecords(readFileSync(file, "utf8"))
    expect(records.lags.every((l) => l.at >= before)).toBe(true)
    const block = records.lags.find((l) => l.ms >= 30)
    expect(block).toBeDefined()
    expect(block!.at).toBeGreaterThanOrEqual(before)
    expect(block!.at).toBeLessThanOrEqual(after)
    const major = records.pauses.find((p) => p.kind === "major")
    expect(major).toBeDefined()
    expect(major!.at).toBeGreaterThan(block!.at)
    expect(major!.at).toBeLessThanOrEqual(after)
  })

  it("is inert without a file: the process runs as it would and writes nothing", () => {
    const dir = mkdtempSync(join(tmpdir(), "voltaic-loop-probe-"))
    dirs.push(dir)
    const { BENCH_LOOP_PROBE_FILE: _unset, ...env } = process.env
    expect(run({ ...env, BENCH_LOOP_PROBE_FILE: "" }, dir)).toBe("done\n")
    expect(readdirSync(dir)).toEqual([])
  })
})

describe("bench/tail-attribution.ts", () => {
  it("parses the probe's lines, leaving out GC work beside the main thread and what it cannot read", () => {
    const records = parseLoopRecords(
      "gc 1000.0 3.50 minor\ngc 1100.5 12.00 major\ngc 1200.0 1.00 incremental\ngc 1300.0 0.50 weakcb\nlag 2000.0 4.25\nnoise\n\n"
    )
    expect(records.pauses).toEqual([{ at: 1000, ms: 3.5, kind: "minor" }, { at: 1100.5, ms: 12, kind: "major" }])
    expect(records.lags).toEqual([{ at: 2000, ms: 4.25, kind: "lag" }])
  })

  it("counts a slow send when a pause or lag overlaps its flight, and only then", () => {
    // 100 sends 10 ms apart taking 1 ms, but for two slow ones: one through a GC pause, one through nothing.
    const samples: Array<Sample> = Array.from({ length: 100 }, (_, i) => [10_000 + i * 10, 1] as const)
    samples[50] = [10_500, 9]
    samples[80] = [10_800, 8]
    const attribution = attributeTail(samples, {
      pauses: [
        { at: 10_504, ms: 3, kind: "minor" },
        // Ends just before send 70 leaves: not inside it.
        { at: 10_695, ms: 5, kind: "minor" },
        // Outside the window altogether.
        { at: 50_000, ms: 5, kind: "major" }
      ],
      lags: [{ at: 10_300.5, ms: 2.5, kind: "lag" }]
    })
    expect(attribution.pauses).toEqual({ count: 2, ms: 8, longest: 5 })
    expect(attribution.lags).toEqual({ count: 1, ms: 2.5, longest: 2.5, atLeast5: 0 })
    // p99 of 100 sends is the 99th value: the two slow ones are at or above it.
    expect(attribution.p99).toMatchObject({ sends: 2, withPause: 1, withLag: 0, withEither: 1 })
    // Send 30 (10,300 → 10,301) overlaps the lag; send 70 (10,700 → 10,701) does not overlap the pause ending at 10,700.
    expect(attribution.all).toMatchObject({ sends: 100, withPause: 1, withLag: 1, withEither: 2 })
    // Without the two touched, the slowest left is the 8 ms send.
    expect(attribution.p99Untouched).toBe(8)
  })
})
