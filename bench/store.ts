/**
 * `npm run bench:store`: what one stored event costs the embedded store, part by part (issue 19
 * item 2: PGlite's MQTT QoS 0 throughput is bound by its thread). PGlite runs as `npm start` runs
 * it: on its own thread (src/store/embedded.ts), a data directory on disk, the schema as migrated.
 * Each round writes a batch of events the way the group-commit writer does (`writeRetried`, the
 * statement of src/store/batch.ts: the insert and the devices' `lastSeenAt`), timed from the send
 * to the answer: the store thread's work, plus the statement's JSON built here and one message each way.
 *
 * Variants, each on its own new database, take one part away at a time, to price it:
 * - `as migrated`: what Voltaic runs; the peer the others are measured against;
 * - `half-size batches`: 2,000 events, the writer's largest batch on PGlite before `PGLITE_MAX_BATCH` (each
 *   batch touches each of its devices once);
 * - `indexes ending in id`: events' secondary indexes as before migrations/0019, 31 bytes longer
 *   an entry;
 * - `indexes without free-space maps`: events' indexes rewritten after `migrate` gave them their
 *   maps, as every index was before (each page split asked the file system for the missing fork);
 * - `devices' pages full`: devices at fillfactor 100, as before migrations/0015 (a device's
 *   `lastSeenAt` moved to another page, with an entry in each of its eight indexes);
 * - `device checked per row`: events' foreign key to devices, as before migrations/0016 (a query
 *   and a row lock per event, where 0016 checks and locks a statement's devices in one query);
 * - `no device check`: 0016's statement trigger dropped (no check at all);
 * - `no (device, timestamp) index` / `no (device, name, timestamp) index`: one of events'
 *   two secondary indexes dropped;
 * - `no lastSeenAt update`: the insert alone, the statement's devices update left out;
 * - `insert only`: all of the above, what is left of an event: its row and its primary key.
 * None of the variants is an option Voltaic offers: each drops what a user relies on (no
 * events of a deleted device, history by device and by name, a device's last sign of life).
 * Rounds alternate between the variants (the order turned each round); the first fifth is warm-up.
 * Each store vacuums itself as `npm start`'s does (src/store/maintenance.ts).
 *
 * Settings (environment): BENCH_BATCH events per batch (`PGLITE_MAX_BATCH`, 4,000: what a QoS 0
 * flood's batches hold), BENCH_DEVICES (1000, the devices the events go to in turn), BENCH_ROUNDS per variant
 * (150), BENCH_VARIANTS (the variants to run, by name, comma-separated; "as migrated", the base of
 * the comparison, always runs), BENCH_NO_RECORD (set: do not append to RESULTS.md).
 */
import { Effect, ManagedRuntime } from "effect"
import { appendFileSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { newId } from "../src/domain/ids.ts"
import { COPY_EVENTS, type EventRow, INSERT_EVENTS_TOUCH_ONE_SESSION, lastSeen, type WriteItem, writeRetried } from "../src/store/batch.ts"
import { eventsCopyText, eventsDocument, seenDocument } from "../src/store/batchText.ts"
import { migrate } from "../src/store/migrate.ts"
import { Sql, type SqlClient } from "../src/store/Sql.ts"
import { PGLITE_MAX_BATCH } from "../src/store/Writer.ts"
import {
  benchRoot,
  gitState,
  intSetting,
  machine,
  markdownTable,
  onShutdown,
  percentile,
  resultsFile,
  runMain,
  textTable,
  utcDate
} from "./harness.ts"

const settings = {
  batch: intSetting("BENCH_BATCH", PGLITE_MAX_BATCH, 1),
  devices: intSetting("BENCH_DEVICES", 1000, 1),
  rounds: intSetting("BENCH_ROUNDS", 150, 10),
  record: process.env.BENCH_NO_RECORD === undefined
}

const DROP_DEVICE_CHECK = "DROP TRIGGER events_device_inserted ON events"
const DROP_TIME_INDEX = "DROP INDEX events_device_time"
const DROP_NAME_INDEX = "DROP INDEX events_device_name_time"

interface Variant {
  readonly name: string
  readonly ddl: ReadonlyArray<string>
  /** The writer's batch (events and lastSeenAt), or the rows' COPY alone. */
  readonly touch: boolean
  /** The one statement of a small batch (`INSERT_EVENTS_TOUCH_ONE_SESSION`), not COPY. */
  readonly statement?: true
  /** Events per batch, when not `BENCH_BATCH` (µs per event are compared). */
  readonly batch?: number
  /** The indexes its DDL made are left without the free-space maps `migrate` gives the others. */
  readonly noMaps?: true
}

const ALL_VARIANTS: ReadonlyArray<Variant> = [
  { name: "as migrated", ddl: [], touch: true },
  { name: "one statement (no COPY)", ddl: [], touch: true, statement: true },
  {
    name: "device checked per row (before 0016)",
    ddl: [DROP_DEVICE_CHECK, "ALTER TABLE events ADD FOREIGN KEY (device_id) REFERENCES devices(id) ON DELETE CASCADE"],
    touch: true
  },
  { name: "devices' pages full (before 0015)", ddl: ["ALTER TABLE devices SET (fillfactor = 100)"], touch: true },
  { name: "half-size batches (the writer's before)", ddl: [], touch: true, batch: 2_000 },
  {
    name: "indexes ending in id (before 0019)",
    ddl: [
      DROP_TIME_INDEX,
      DROP_NAME_INDEX,
      "CREATE INDEX events_device_time ON events (device_id, timestamp, id)",
      "CREATE INDEX events_device_name_time ON events (device_id, name, timestamp, id)"
    ],
    touch: true
  },
  // A rewritten index has a new file without the map `migrate` gave the first (pgliteWorker.ts).
  { name: "indexes without free-space maps (before migrate made them)", ddl: ["REINDEX TABLE events"], touch: true, noMaps: true },
  { name: "no device check", ddl: [DROP_DEVICE_CHECK], touch: true },
  { name: "no (device, timestamp) index", ddl: [DROP_TIME_INDEX], touch: true },
  { name: "no (device, name, timestamp) index", ddl: [DROP_NAME_INDEX], touch: true },
  { name: "no lastSeenAt update", ddl: [], touch: false },
  { name: "insert only", ddl: [DROP_DEVICE_CHECK, DROP_TIME_INDEX, DROP_NAME_INDEX], touch: false }
]
const chosen = process.env.BENCH_VARIANTS?.split(",")
const VARIANTS = chosen === undefined ? ALL_VARIANTS : ALL_VARIANTS.filter((v, i) => i === 0 || chosen.includes(v.name))


const ORGANISATION = "org_benchstore"

interface Store {
  readonly variant: Variant
  readonly sql: SqlClient
  readonly run: <A, E>(effect: Effect.Effect<A, E, Sql>) => Promise<A>
  /** µs per event of each measured round. */
  readonly perEvent: Array<number>
}

const open = async (variant: Variant, deviceIds: ReadonlyArray<string>): Promise<Store> => {
  const dataDir = mkdtempSync(join(tmpdir(), "voltaic-bench-store-"))
  const runtime = ManagedRuntime.make(Sql.layer({ _tag: "pglite", dataDir }, "bench:store"))
  onShutdown(async () => {
    await runtime.dispose()
    rmSync(dataDir, { recursive: true, force: true })
  })
  const run = <A, E>(effect: Effect.Effect<A, E, Sql>) => runtime.runPromise(effect)
  const sql = await run(Effect.service(Sql))
  await run(migrate)
  for (const statement of variant.ddl) await run(sql.exec(statement))
  // Indexes the DDL made get their maps, as `migrate` gives them (pgliteWorker.ts).
  if (variant.noMaps === undefined) await sql.embedded?.freeSpaceMaps()
  const now = Date.now()
  await run(sql.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ($1, 'bench', $2, $2)", [ORGANISATION, now]))
  await run(sql.query(
    `INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
       SELECT d.id, $2, 'bench-' || d.id, d.id, $3, $3 FROM unnest($1::text[]) AS d(id)`,
    [deviceIds, ORGANISATION, now]
  ))
  return { variant, sql, run, perEvent: [] }
}

/** Events per batch of a variant. */
const batchOf = (variant: Variant) => variant.batch ?? settings.batch

/** The next batch: `size` events over the devices in turn, as one device's payload would be. */
const makeBatch = (deviceIds: ReadonlyArray<string>, from: number, size: number): Array<EventRow> => {
  const now = Date.now()
  const rows: Array<EventRow> = []
  for (let i = 0; i < size; i++) {
    const n = from + i
    rows.push({
      id: newId("evt", now),
      organisationId: ORGANISATION,
      deviceId: deviceIds[n % deviceIds.length],
      name: "temperature",
      data: `{"value":${(n % 400) / 10},"unit":"C"}`,
      timestamp: now,
      receivedAt: now,
      protocol: "mqtt"
    })
  }
  return rows
}

const write = (store: Store, rows: ReadonlyArray<EventRow>) => {
  const items = rows.map((row): WriteItem => ({ _tag: "event", row }))
  if (store.variant.statement) {
    return store.run(store.sql.write(INSERT_EVENTS_TOUCH_ONE_SESSION, [eventsDocument(rows), seenDocument(lastSeen(items))]))
  }
  return store.variant.touch
    ? store.run(writeRetried(store.sql, items, 0))
    : store.run(store.sql.script([{ copy: COPY_EVENTS, data: eventsCopyText(rows) }]))
}

const columns = ["variant", "µs/event (median)", "p25–p75", "vs as migrated", "saved µs/event", "events/s at this cost"]

const tableRows = (stores: ReadonlyArray<Store>) => {
  const sorted = stores.map((s) => [...s.perEvent].sort((a, b) => a - b))
  const base = percentile(sorted[0], 50)
  return stores.map((s, i) => {
    const m = percentile(sorted[i], 50)
    return [
      s.variant.name,
      m.toFixed(1),
      `${percentile(sorted[i], 25).toFixed(1)}–${percentile(sorted[i], 75).toFixed(1)}`,
      `${(m / base).toFixed(2)}×`,
      i === 0 ? "–" : (base - m).toFixed(1),
      Math.round(1e6 / m).toLocaleString("en-US")
    ]
  })
}

const main = async (): Promise<number> => {
  console.log(`bench:store: ${VARIANTS.length} PGlite stores, ${settings.rounds} rounds of ${settings.batch} events over ${settings.devices} devices each`)
  const deviceIds = Array.from({ length: settings.devices }, () => newId("dev", Date.now()))
  const stores: Array<Store> = []
  for (const variant of VARIANTS) stores.push(await open(variant, deviceIds))
  const warmup = Math.floor(settings.rounds / 5)
  let sent = 0
  for (let round = 0; round < settings.rounds; round++) {
    for (let k = 0; k < stores.length; k++) {
      const store = stores[(round + k) % stores.length]
      // Every variant takes `BENCH_BATCH` events a round: one of smaller batches takes several.
      const size = batchOf(store.variant)
      for (let taken = 0; taken < settings.batch; taken += size) {
        const rows = makeBatch(deviceIds, sent, Math.min(size, settings.batch - taken))
        sent += rows.length
        const started = performance.now()
        await write(store, rows)
        const us = ((performance.now() - started) * 1000) / rows.length
        if (round >= warmup) store.perEvent.push(us)
      }
    }
    if ((round + 1) % 25 === 0) process.stdout.write(`  round ${round + 1}/${settings.rounds}\n`)
  }
  // Every batch went in whole: the counts are what was sent, or the figures measured nothing.
  for (const store of stores) {
    const [{ n }] = await store.run(store.sql.query<{ n: number }>("SELECT count(*)::int AS n FROM events"))
    if (n !== settings.rounds * settings.batch) throw new Error(`${store.variant.name}: ${n} events stored, ${settings.rounds * settings.batch} sent`)
  }
  const body = tableRows(stores)
  console.log(`\n${textTable(columns, body, 1)}\n`)
  if (settings.record) {
    appendFileSync(
      resultsFile,
      `\n## Store: ${utcDate()}\n\n` +
        `Machine: ${machine()}. Voltaic at ${gitState(benchRoot, ["src", "migrations"])}. PGlite on its own thread with a data directory on disk, as \`npm start\` runs it; ` +
        `each variant on its own new database; ${settings.rounds} rounds of ${settings.batch} events over ${settings.devices} devices per variant, alternated, ` +
        `the first ${warmup} left out. A batch is timed from its send to its answer. "events/s at this cost" is what the store's thread alone could take.\n\n` +
        `${markdownTable(columns, body, 1)}\n`
    )
    console.log(`appended to ${resultsFile}`)
  }
  return 0
}

runMain("bench:store", 20 * 60_000, main)
