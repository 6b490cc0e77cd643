/**
 * Loaded into a broker process by `bench/ingest.ts` (`node --expose-gc --import tsx
 * --import ./bench/memory-probe.ts …`); changes nothing until the process receives SIGUSR2,
 * then runs a full garbage collection and prints one line:
 * `memory-probe {"rss":…,"heapUsed":…,"external":…,"arrayBuffers":…}` (bytes).
 */
process.on("SIGUSR2", () => {
  // Without --expose-gc there is no `gc` global at all: read it off globalThis.
  const collect = globalThis.gc
  if (collect !== undefined) {
    collect()
    collect()
  }
  const { rss, heapUsed, heapTotal, external, arrayBuffers } = process.memoryUsage()
  process.stdout.write(`memory-probe ${JSON.stringify({ rss, heapUsed, heapTotal, external, arrayBuffers })}\n`)
})
