/**
 * Loaded into every broker process `bench/ingest.ts` starts (`--import ./bench/loop-probe.ts`);
 * does nothing unless BENCH_LOOP_PROBE_FILE names a file (bench:ingest sets it with
 * BENCH_LATENCY_DUMP). Then it appends to that file, as they happen:
 * - `gc <epoch ms at its start> <ms> <kind>`: each garbage collection of this process's heap
 *   (`minor`: a scavenge, `major`: a mark-compact, `incremental`, `weakcb`), from
 *   `PerformanceObserver`;
 * - `lag <epoch ms when it was due> <ms late>`: each time a 1 ms timer of the main thread fired
 *   `REPORT_MS` or more late, as `bench/stall-probe.ts` does for a bystander: the event loop busy
 *   (a burst of work, a GC pause) or its thread waiting to be run.
 *
 * `bench/latency-dump.ts <dump> <this file>` then tells which of a window's slow sends had one of
 * these inside their flight. The timer wakes the process every millisecond, a small cost of its
 * own: read the figures of a run with the probe beside each other, not beside a run without it.
 */
import { appendFileSync, writeFileSync } from "node:fs"
import { constants, PerformanceObserver } from "node:perf_hooks"
import { onLateWakeups } from "./late-wakeups.ts"

const REPORT_MS = 2

const file = process.env.BENCH_LOOP_PROBE_FILE
if (file !== undefined && file !== "") {
  const kinds: Record<number, string> = {
    [constants.NODE_PERFORMANCE_GC_MINOR]: "minor",
    [constants.NODE_PERFORMANCE_GC_MAJOR]: "major",
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental",
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: "weakcb"
  }
  // A new broker of the same target (a later run with the same prefix) starts the file afresh, as its dumps are.
  writeFileSync(file, "")
  let lines: Array<string> = []
  const flush = () => {
    if (lines.length === 0) return
    appendFileSync(file, lines.join(""))
    lines = []
  }
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      // A GC entry's `detail.kind` (not in every version of Node's typings).
      const detail: unknown = Reflect.get(entry, "detail")
      const kind = typeof detail === "object" && detail !== null ? Reflect.get(detail, "kind") : undefined
      lines.push(`gc ${(performance.timeOrigin + entry.startTime).toFixed(1)} ${entry.duration.toFixed(2)} ${typeof kind === "number" ? kinds[kind] ?? "other" : "other"}\n`)
    }
  }).observe({ entryTypes: ["gc"] })
  onLateWakeups(REPORT_MS, (dueAt, late) => lines.push(`lag ${dueAt.toFixed(1)} ${late.toFixed(2)}\n`)).unref()
  // Written in one call a second (and at exit), not one per record, so as not to add stalls of its own.
  setInterval(flush, 1000).unref()
  process.on("exit", flush)
}
