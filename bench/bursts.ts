/**
 * `npm run bench:bursts`: PGlite under the load of meters that report together — bursts of events
 * with quiet gaps between them — and where its checkpoints fall. PGlite's checkpoint is immediate
 * and holds every other statement while it writes (src/store/maintenance.ts): one inside a burst is
 * a batch held for hundreds of milliseconds, one in a gap holds nobody.
 *
 * The store is opened as `npm start` opens it (`Sql.layer`: PGlite on its own thread, a data
 * directory on disk, its maintenance fiber running), migrated, with 1,000 devices. Each burst writes
 * its events in batches the way the group-commit writer does (`writeRetried`: the COPY and the
 * devices' `lastSeenAt`), back to back, each timed from its send to its answer; then the store is
 * left alone for the gap. The redo point (`pg_control_checkpoint()`) is read before and after each
 * burst and gap: a move is a checkpoint there.
 *
 * With BENCH_PEER (a checkout of an earlier commit, `git worktree add --detach <dir> <commit>` and its
 * node_modules) the same runs use that checkout's store, alternated with this one's.
 *
 * Settings (environment): BENCH_BURSTS (8), BENCH_BURST_EVENTS (200000), BENCH_GAP_MS (3000),
 * BENCH_BATCH (1000), BENCH_REPEAT (2: runs of each checkout, alternated), BENCH_PEER,
 * BENCH_NO_RECORD (set: do not append to RESULTS.md).
 */
import { Effect, ManagedRuntime } from "effect"
import { execFileSync } from "node:child_process"
import { appendFileSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import type * as BatchModule from "../src/store/batch.ts"
import type * as IdsModule from "../src/domain/ids.ts"
import type * as MigrateModule from "../src/store/migrate.ts"
import type * as SqlModule from "../src/store/Sql.ts"
import { benchRoot, gitState, intSetting, machine, markdownTable, onShutdown, percentile, resultsFile, runMain, textTable, utcDate } from "./harness.ts"

const settings = {
  bursts: intSetting("BENCH_BURSTS", 8, 1),
  perBurst: intSetting("BENCH_BURST_EVENTS", 200_000, 1),
  gapMs: intSetting("BENCH_GAP_MS", 3_000, 0),
  batch: intSetting("BENCH_BATCH", 1000, 1),
  devices: 1000,
  repeat: intSetting("BENCH_REPEAT", 2, 1),
  record: process.env.BENCH_NO_RECORD === undefined
}

/** A batch held this long is counted apart: a checkpoint's hold, not a batch's own work (30-90 ms here). */
const HELD_MS = 150

interface Checkout {
  readonly label: string
  readonly dir: string
}

const here: Checkout = { label: "this checkout", dir: benchRoot }
const peer: Checkout | undefined = process.env.BENCH_PEER === undefined || process.env.BENCH_PEER === ""
  ? undefined
  : (() => {
    const dir = resolve(process.env.BENCH_PEER)
    return { label: `peer ${execFileSync("git", ["-C", dir, "rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim()}`, dir }
  })()

interface Modules {
  readonly Sql: typeof SqlModule.Sql
  readonly migrate: typeof MigrateModule.migrate
  readonly writeRetried: typeof BatchModule.writeRetried
  readonly newId: typeof IdsModule.newId
}

/** The checkout's own store code (a peer's may differ in anything but these names). */
const modulesOf = async (dir: string): Promise<Modules> => {
  const from = (path: string) => pathToFileURL(join(dir, path)).href
  const sql: typeof SqlModule = await import(from("src/store/Sql.ts"))
  const migrate: typeof MigrateModule = await import(from("src/store/migrate.ts"))
  const batch: typeof BatchModule = await import(from("src/store/batch.ts"))
  const ids: typeof IdsModule = await import(from("src/domain/ids.ts"))
  return { Sql: sql.Sql, migrate: migrate.migrate, writeRetried: batch.writeRetried, newId: ids.newId }
}

interface Burst {
  readonly eventsPerSecond: number
  /** Each batch's time, ms, sorted. */
  readonly batchMs: ReadonlyArray<number>
  readonly checkpointInBurst: boolean
  readonly checkpointInGap: boolean
  readonly walMb: number
}

interface Run {
  readonly checkout: Checkout
  readonly bursts: ReadonlyArray<Burst>
}

const runOnce = async (checkout: Checkout): Promise<Run> => {
  const m = await modulesOf(checkout.dir)
  const dataDir = mkdtempSync(join(tmpdir(), "voltaic-bench-bursts-"))
  const runtime = ManagedRuntime.make(m.Sql.layer({ _tag: "pglite", dataDir }, "bench:bursts"))
  const removed = onShutdown(async () => {
    await runtime.dispose()
    rmSync(dataDir, { recursive: true, force: true })
  })
  try {
    const run = <A, E>(effect: Effect.Effect<A, E, SqlModule.Sql>) => runtime.runPromise(effect)
    const sql = await run(Effect.service(m.Sql))
    await run(m.migrate)
    const organisation = "org_benchbursts"
    const now0 = Date.now()
    const devices = Array.from({ length: settings.devices }, () => m.newId("dev", now0))
    await run(sql.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ($1, 'bench', $2, $2)", [organisation, now0]))
    await run(sql.query(
      `INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
         SELECT d.id, $2, 'bench-' || d.id, d.id, $3, $3 FROM unnest($1::text[]) AS d(id)`,
      [devices, organisation, now0]
    ))
    /** The redo point, and the WAL's insert position in bytes. */
    const position = async () => {
      const [row] = await run(sql.query<{ redo: string; bytes: number }>(
        "SELECT redo_lsn::text AS redo, (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::float8 AS bytes FROM pg_control_checkpoint()"
      ))
      return { redo: row.redo, bytes: Number(row.bytes) }
    }
    let n = 0
    const bursts: Array<Burst> = []
    for (let b = 0; b < settings.bursts; b++) {
      const before = await position()
      const batchMs: Array<number> = []
      const started = performance.now()
      for (let sent = 0; sent < settings.perBurst; sent += settings.batch) {
        const now = Date.now()
        const items = Array.from({ length: Math.min(settings.batch, settings.perBurst - sent) }, () => {
          const k = n++
          return {
            _tag: "event" as const,
            row: {
              id: m.newId("evt", now),
              organisationId: organisation,
              deviceId: devices[k % devices.length],
              name: "energy",
              data: `{"value":${k % 400},"unit":"Wh"}`,
              timestamp: now,
              receivedAt: now,
              protocol: "mqtt" as const
            }
          }
        })
        const t = performance.now()
        await run(m.writeRetried(sql, items, 0))
        batchMs.push(performance.now() - t)
      }
      const seconds = (performance.now() - started) / 1000
      const after = await position()
      await new Promise((r) => setTimeout(r, settings.gapMs))
      const gapEnd = await position()
      bursts.push({
        eventsPerSecond: settings.perBurst / seconds,
        batchMs: batchMs.sort((a, b) => a - b),
        checkpointInBurst: after.redo !== before.redo,
        checkpointInGap: gapEnd.redo !== after.redo,
        walMb: (after.bytes - before.bytes) / 1e6
      })
      process.stdout.write(".")
    }
    const [{ count }] = await run(sql.query<{ count: number }>("SELECT count(*)::int AS count FROM events"))
    if (count !== settings.bursts * settings.perBurst) throw new Error(`${checkout.label}: ${count} events stored, ${settings.bursts * settings.perBurst} sent`)
    return { checkout, bursts }
  } finally {
    await removed()
  }
}

const columns = ["checkout", "run", "events/s", "batch p50 ms", "batch p99 ms", "batch max ms", `batches ≥ ${HELD_MS} ms`, "bursts with one", "checkpoints in bursts", "checkpoints in gaps", "WAL MB per burst"]

const rowOf = (r: Run, i: number): Array<string> => {
  const all = r.bursts.flatMap((b) => b.batchMs).sort((a, b) => a - b)
  const held = r.bursts.map((b) => b.batchMs.filter((ms) => ms >= HELD_MS).length)
  return [
    r.checkout.label,
    String(i + 1),
    Math.round(r.bursts.reduce((s, b) => s + b.eventsPerSecond, 0) / r.bursts.length).toLocaleString("en-US"),
    percentile(all, 50).toFixed(1),
    percentile(all, 99).toFixed(1),
    all[all.length - 1].toFixed(0),
    String(held.reduce((s, h) => s + h, 0)),
    `${held.filter((h) => h > 0).length} of ${r.bursts.length}`,
    String(r.bursts.filter((b) => b.checkpointInBurst).length),
    String(r.bursts.filter((b) => b.checkpointInGap).length),
    (r.bursts.reduce((s, b) => s + b.walMb, 0) / r.bursts.length).toFixed(0)
  ]
}

const main = async (): Promise<number> => {
  const checkouts = peer === undefined ? [here] : [here, peer]
  console.log(
    `bench:bursts: ${settings.bursts} bursts of ${settings.perBurst.toLocaleString("en-US")} events in ${settings.batch}-event batches, ` +
      `${settings.gapMs} ms apart, PGlite on disk; ${checkouts.map((c) => c.label).join(" and ")}, ${settings.repeat} runs each, alternated`
  )
  const runs: Array<Run> = []
  for (let r = 0; r < settings.repeat; r++) {
    for (const checkout of r % 2 === 0 ? checkouts : [...checkouts].reverse()) {
      process.stdout.write(`  ${checkout.label} run ${r + 1} `)
      runs.push(await runOnce(checkout))
      console.log(` ${rowOf(runs[runs.length - 1], r).slice(2).join(" | ")}`)
    }
  }
  const ordered = checkouts.flatMap((c) => runs.filter((r) => r.checkout === c))
  const body = ordered.map((r) => rowOf(r, runs.filter((x) => x.checkout === r.checkout).indexOf(r)))
  console.log(`\n${textTable(columns, body, 2)}\n`)
  if (settings.record) {
    appendFileSync(
      resultsFile,
      `\n## Bursts: ${utcDate()}\n\n` +
        `\`npm run bench:bursts\` (bench/bursts.ts). Machine: ${machine()}. This checkout at ${gitState(benchRoot, ["src", "migrations"])}` +
        `${peer === undefined ? "" : `; ${peer.label}, its own src, in the same run`}. PGlite opened as \`npm start\` opens it (its own thread, ` +
        `a data directory on disk, its maintenance fiber), 1,000 devices; ${settings.bursts} bursts of ${settings.perBurst.toLocaleString("en-US")} events ` +
        `in ${settings.batch}-event batches as the writer writes them (the COPY and the devices' \`lastSeenAt\`), back to back, ` +
        `${settings.gapMs} ms of quiet after each; ${settings.repeat} runs of each checkout, alternated, each on a new data directory. ` +
        `A batch is timed from its send to its answer; a checkpoint is a move of the redo point during the burst or the gap.\n\n` +
        `${markdownTable(columns, body, 2)}\n`
    )
    console.log(`appended to ${resultsFile}`)
  }
  return 0
}

runMain("bench:bursts", 30 * 60_000, main)
