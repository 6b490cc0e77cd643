/**
 * Reads a BENCH_LATENCY_DUMP file of bench:ingest (`npx tsx bench/latency-dump.ts <file>`) and
 * prints what its tail is made of: the percentiles, the sends at or above the p99 per second of
 * the window, and the "episodes" (slow sends less than 20 ms apart, merged) with their size.
 * A tail of a few long episodes (the whole machine or the store held up) reads differently from
 * one spread over single sends (a per-send cost such as a GC pause).
 *
 * With the broker's `bench/loop-probe.ts` file of the same run as a second argument
 * (`<prefix>-<target>-loop.txt`, written beside the dumps), it also tells how many of the slow
 * sends had one of the broker's GC pauses or event-loop lags inside their flight, against the
 * share of all sends (chance), and the p99 of the sends that had neither.
 */
import { readFileSync } from "node:fs"
import { percentile } from "./harness.ts"
import { attributeTail, parseLoopRecords, type TailShare } from "./tail-attribution.ts"

const file = process.argv[2]
const loopFile = process.argv[3]
if (file === undefined) {
  console.error("usage: tsx bench/latency-dump.ts <dump.json> [<loop-probe file>]")
  process.exit(2)
}
const { samples } = JSON.parse(readFileSync(file, "utf8")) as { samples: Array<[number, number]> }
if (samples.length === 0) {
  console.log("no samples")
  process.exit(0)
}
samples.sort((a, b) => a[0] - b[0])
// The same percentiles as bench:ingest's tables.
const sorted = samples.map((s) => s[1]).sort((a, b) => a - b)
const p99 = percentile(sorted, 99)
console.log(`${samples.length} sends: p50 ${percentile(sorted, 50).toFixed(2)} ms, p90 ${percentile(sorted, 90).toFixed(2)}, p99 ${p99.toFixed(2)}, max ${sorted.at(-1)!.toFixed(2)}`)

const start = samples[0][0]
const perSecond = new Map<number, number>()
const episodes: Array<{ from: number; to: number; sends: number; max: number }> = []
for (const [sent, ms] of samples) {
  if (ms < p99) continue
  const second = Math.floor((sent - start) / 1000)
  perSecond.set(second, (perSecond.get(second) ?? 0) + 1)
  const last = episodes.at(-1)
  if (last !== undefined && sent - last.to < 20) {
    last.to = sent
    last.sends += 1
    last.max = Math.max(last.max, ms)
  } else episodes.push({ from: sent, to: sent, sends: 1, max: ms })
}
console.log(`sends ≥ p99 per second of the window: ${[...perSecond].map(([s, n]) => `${s}:${n}`).join(" ")}`)
console.log(`${episodes.length} episodes (slow sends < 20 ms apart):`)
for (const e of [...episodes].sort((a, b) => b.sends - a.sends).slice(0, 15)) {
  console.log(`  at ${((e.from - start) / 1000).toFixed(2)} s, ${(e.to - e.from).toFixed(0)} ms long: ${e.sends} sends, worst ${e.max.toFixed(1)} ms`)
}

if (loopFile !== undefined) {
  const a = attributeTail(samples, parseLoopRecords(readFileSync(loopFile, "utf8")))
  const pct = (n: number, of: number) => `${of === 0 ? 0 : Math.round((100 * n) / of)} %`
  const line = (name: string, s: TailShare) =>
    `  ${name} (${s.sends} sends): a GC pause inside ${pct(s.withPause, s.sends)}, a loop lag inside ${pct(s.withLag, s.sends)}, either ${pct(s.withEither, s.sends)}`
  console.log(`the broker in the window: ${a.pauses.count} GC pauses (${a.pauses.ms.toFixed(0)} ms, the longest ${a.pauses.longest.toFixed(1)}), ` +
    `${a.lags.count} loop lags of 2 ms or more (${a.lags.ms.toFixed(0)} ms, ${a.lags.atLeast5} of 5 ms or more, the longest ${a.lags.longest.toFixed(1)})`)
  console.log(line(`sends ≥ p99 ${a.p99.threshold.toFixed(2)} ms`, a.p99))
  console.log(line(`sends ≥ p90 ${a.p90.threshold.toFixed(2)} ms`, a.p90))
  console.log(line("every send", a.all))
  console.log(`  p99 of the sends with neither inside: ${a.p99Untouched === undefined ? "–" : `${a.p99Untouched.toFixed(2)} ms`}`)
}
