/**
 * A bystander for bench:ingest's latency and command cases: a process that does nothing but wake
 * every millisecond, and prints each wake-up that came `REPORT_MS` or more late, as
 * `<epoch ms when it was due> <ms late>`. Nothing it does waits on the server or the load, so
 * a late wake-up is the machine's: its cores taken by others, or (in a VM) its virtual CPU not run.
 *
 * The tails the latency and command cases measure are a few milliseconds long, and on this
 * project's 2-core VMs an idle machine stalled such a process 26 times by 4 ms or more in 20 s
 * (the longest 23 ms). A path that crosses more threads and processes (Voltaic: the load, the
 * server's main thread, the store's thread or Postgres) meets more of them than one that crosses
 * fewer (bare aedes). The bench counts the stalls within each case's measured window
 * (`bench/harness.ts` `startStallProbe`), so a p99 can be read beside what the machine did then.
 */
import { onLateWakeups } from "./late-wakeups.ts"

const REPORT_MS = 2

onLateWakeups(REPORT_MS, (dueAt, late) => process.stdout.write(`${dueAt.toFixed(1)} ${late.toFixed(2)}\n`))

process.stdout.write("READY\n")
// Ends with the bench: its stdin closes when it exits.
process.stdin.resume()
process.stdin.on("end", () => process.exit(0))
