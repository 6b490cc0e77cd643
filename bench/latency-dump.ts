/**
 * Reads a BENCH_LATENCY_DUMP file of bench:ingest (`npx tsx bench/latency-dump.ts <file>`) and
 * prints what its tail is made of: the percentiles, the sends at or above the p99 per second of
 * the window, and the "episodes" (slow sends less than 20 ms apart, merged) with their size.
 * A tail of a few long episodes (the whole machine or the store held up) reads differently from
 * one spread over single sends (a per-send cost such as a GC pause).
 */
import { readFileSync } from "node:fs"
import { percentile } from "./harness.ts"

const file = process.argv[2]
if (file === undefined) {
  console.error("usage: tsx bench/latency-dump.ts <dump.json>")
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
