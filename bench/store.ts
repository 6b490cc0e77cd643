/**
 * `npm run bench:store`: what one stored event costs the embedded store, part by part (issue 19
 * item 2: PGlite's MQTT QoS 0 throughput is bound by its thread), or the Postgres server (item 4). PGlite runs as `npm start` runs
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
 * - `device_seen's pages full`: `device_seen` (migrations/0021) at fillfactor 100 instead of 50 (a
 *   device's `lastSeenAt` moved to another page, with an entry in its index);
 * - `lastSeenAt in devices as one statement (before 0021)`: the column back in `devices`, moved by
 *   the one statement (compare with `one statement (no COPY)`);
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
 * `BENCH_STORE=postgres` prices the Postgres server's statement instead (what the writer sends a
 * Postgres server, src/store/batch.ts: `INSERT_EVENTS_TOUCH`, or `INSERT_EVENTS_SEEN_ONE_BY_ONE`
 * for a batch from a few devices): each variant on its own new database of the server
 * `BENCH_PG_ADMIN_URL` names, migrated; besides the wall time of a batch
 * (its round trip included), the CPU its backends spent (user + system, from `/proc`: the server
 * must run on this machine), which is what the batch costs a server shared with the rest. The
 * variants there are shapes of that statement and parts taken away (`POSTGRES_VARIANTS`):
 * - `lastSeenAt in devices (before 0021)`: the column back in `devices` (each update a new version
 *   of the device's whole row, and its constraint trigger), moved by the same function;
 * - `device_seen's pages full`: as on PGlite;
 * - `devices always joined` / `always one by one`: one of the two statements the writer picks
 *   between by the batch's devices (`DEVICES_ONE_BY_ONE`), whatever the batch;
 * - `no device check`, `no secondary indexes`, `no lastSeenAt update`, `insert only`: as above.
 * (`devices by = ANY (before 0020)`, measured in session 40, went with 0021: that column is gone.)
 *
 * Settings (environment): BENCH_BATCH events per batch (`PGLITE_MAX_BATCH`, 4,000: what a QoS 0
 * flood's batches hold; 1,000 on Postgres), BENCH_DEVICES (1000, the devices the events go to in turn), BENCH_ROUNDS per variant
 * (150), BENCH_EACH (events per statement, when a round's BENCH_BATCH events go as several: the
 * writer's batches held 14.5 on average at 5,000 events/s), BENCH_VARIANTS (the variants to run,
 * by name, comma-separated; "as migrated", the base of the comparison, always runs),
 * BENCH_STORE (pglite; postgres), BENCH_PG_ADMIN_URL (postgres://postgres@127.0.0.1:5432/test),
 * BENCH_NO_RECORD (set: do not append to RESULTS.md).
 */
import { Effect, ManagedRuntime, Redacted } from "effect"
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { newId } from "../src/domain/ids.ts"
import {
  COPY_EVENTS,
  type EventRow,
  INSERT_EVENTS_DOCUMENT,
  INSERT_EVENTS_SEEN_ONE_BY_ONE,
  INSERT_EVENTS_TOUCH,
  INSERT_EVENTS_TOUCH_ONE_SESSION,
  INSERT_EVENTS_WITH_SEEN,
  lastSeen,
  type WriteItem,
  writeRetried
} from "../src/store/batch.ts"
import { eventsCopyText, eventsDocument, seenDocument } from "../src/store/batchText.ts"
import { migrate } from "../src/store/migrate.ts"
import { Sql, type SqlClient } from "../src/store/Sql.ts"
import { PGLITE_MAX_BATCH } from "../src/store/Writer.ts"
import {
  type BenchDatabase,
  benchRoot,
  createBenchDatabase,
  gitState,
  intSetting,
  machine,
  markdownTable,
  onShutdown,
  percentile,
  processCpuSeconds,
  resultsFile,
  runMain,
  textTable,
  utcDate
} from "./harness.ts"

const postgresTarget = process.env.BENCH_STORE === "postgres"
if (process.env.BENCH_STORE !== undefined && process.env.BENCH_STORE !== "pglite" && !postgresTarget) {
  throw new Error(`BENCH_STORE: pglite or postgres, not ${process.env.BENCH_STORE}`)
}

const settings = {
  batch: intSetting("BENCH_BATCH", postgresTarget ? 1_000 : PGLITE_MAX_BATCH, 1),
  each: process.env.BENCH_EACH === undefined ? undefined : intSetting("BENCH_EACH", 10, 1),
  pgAdminUrl: process.env.BENCH_PG_ADMIN_URL ?? "postgres://postgres@127.0.0.1:5432/test",
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
  /** A statement of its own for the batch, with its parameters, instead of the writer's. */
  readonly shape?: Shape
}

interface Shape {
  readonly text: string
  readonly params: (rows: ReadonlyArray<EventRow>, seen: ReadonlyMap<string, number>) => ReadonlyArray<unknown>
}

/** The writer's two documents: the events, and each device's latest receipt. */
const documents = (rows: ReadonlyArray<EventRow>, seen: ReadonlyMap<string, number>) => [eventsDocument(rows), seenDocument(seen)]

/**
 * Before migrations/0021 a device's lastSeenAt was a column of `devices`: the column put back, and
 * the writer's function (`events_written`, as that migration makes it) moving it there instead of
 * in `device_seen`.
 */
const SEEN_IN_DEVICES = "ALTER TABLE devices ADD COLUMN last_seen_at bigint"
const eventsWrittenOnDevices = () => {
  const migration = readFileSync(fileURLToPath(new URL("../migrations/0021_device_seen.sql", import.meta.url)), "utf8")
  const made = migration.slice(migration.indexOf("CREATE FUNCTION events_written"))
  const onDevices = made
    .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    .replaceAll("ds.device_id", "ds.id")
    .replaceAll("locked.device_id", "locked.id")
    .replaceAll(" device_id = device.id", " id = device.id")
    .replaceAll("device_seen", "devices")
  if (!made.includes("device_seen") || onDevices.includes("device_seen")) throw new Error("migrations/0021's events_written is not as bench:store reads it")
  return onDevices
}
const BEFORE_0021 = [SEEN_IN_DEVICES, eventsWrittenOnDevices()]

/** PGlite's one statement before migrations/0021 (`INSERT_EVENTS_TOUCH_ONE_SESSION` on `devices`). */
const TOUCH_DEVICES_ONE_SESSION = `${INSERT_EVENTS_WITH_SEEN}
  UPDATE devices d SET last_seen_at = GREATEST(COALESCE(d.last_seen_at, 0), seen.at)
  FROM seen WHERE d.id = seen.id`

const ALL_VARIANTS: ReadonlyArray<Variant> = [
  { name: "as migrated", ddl: [], touch: true },
  { name: "one statement (no COPY)", ddl: [], touch: true, statement: true },
  {
    name: "lastSeenAt in devices as one statement (before 0021)",
    ddl: [SEEN_IN_DEVICES],
    touch: true,
    shape: { text: TOUCH_DEVICES_ONE_SESSION, params: documents }
  },
  {
    name: "device checked per row (before 0016)",
    ddl: [DROP_DEVICE_CHECK, "ALTER TABLE events ADD FOREIGN KEY (device_id) REFERENCES devices(id) ON DELETE CASCADE"],
    touch: true
  },
  { name: "device_seen's pages full", ddl: ["ALTER TABLE device_seen SET (fillfactor = 100)"], touch: true },
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

const insertOnly: Shape = { text: INSERT_EVENTS_DOCUMENT, params: (rows) => [eventsDocument(rows)] }

/**
 * Postgres: the writer's statement (`INSERT_EVENTS_TOUCH`, or `INSERT_EVENTS_SEEN_ONE_BY_ONE` for a
 * batch from at most `DEVICES_ONE_BY_ONE` devices), shapes of it, and parts of it taken away, each
 * on a database of its own.
 */
const POSTGRES_VARIANTS: ReadonlyArray<Variant> = [
  { name: "as migrated", ddl: [], touch: true },
  { name: "lastSeenAt in devices (before 0021)", ddl: BEFORE_0021, touch: true },
  { name: "device_seen's pages full", ddl: ["ALTER TABLE device_seen SET (fillfactor = 100)"], touch: true },
  { name: "devices always joined", ddl: [], touch: true, shape: { text: INSERT_EVENTS_TOUCH, params: documents } },
  { name: "devices always one by one", ddl: [], touch: true, shape: { text: INSERT_EVENTS_SEEN_ONE_BY_ONE, params: documents } },
  { name: "no device check", ddl: [DROP_DEVICE_CHECK], touch: true },
  { name: "no secondary indexes", ddl: [DROP_TIME_INDEX, DROP_NAME_INDEX], touch: true },
  { name: "no lastSeenAt update", ddl: [], touch: true, shape: insertOnly },
  { name: "insert only", ddl: [DROP_DEVICE_CHECK, DROP_TIME_INDEX, DROP_NAME_INDEX], touch: true, shape: insertOnly }
]

const chosen = process.env.BENCH_VARIANTS?.split(",")
const CANDIDATES = postgresTarget ? POSTGRES_VARIANTS : ALL_VARIANTS
const VARIANTS = chosen === undefined ? CANDIDATES : CANDIDATES.filter((v, i) => i === 0 || chosen.includes(v.name))

const ORGANISATION = "org_benchstore"

interface Store {
  readonly variant: Variant
  readonly sql: SqlClient
  readonly run: <A, E>(effect: Effect.Effect<A, E, Sql>) => Promise<A>
  /** µs per event of each measured round. */
  readonly perEvent: Array<number>
  /** Postgres: the database, and the CPU seconds its backends spent in the measured rounds. */
  readonly database?: BenchDatabase
  cpuSeconds: number
}

/** A Postgres store, or a PGlite one on its own thread with a data directory on disk. */
const runtimeFor = async (): Promise<{ runtime: ManagedRuntime.ManagedRuntime<Sql, unknown>; database?: BenchDatabase }> => {
  if (postgresTarget) {
    const database = await createBenchDatabase(settings.pgAdminUrl, "voltaic_bench_store")
    const runtime = ManagedRuntime.make(Sql.layer({ _tag: "postgres", url: Redacted.make(database.url) }, "bench:store"))
    onShutdown(async () => {
      await runtime.dispose()
      await database.drop()
    })
    return { runtime, database }
  }
  const dataDir = mkdtempSync(join(tmpdir(), "voltaic-bench-store-"))
  const runtime = ManagedRuntime.make(Sql.layer({ _tag: "pglite", dataDir }, "bench:store"))
  onShutdown(async () => {
    await runtime.dispose()
    rmSync(dataDir, { recursive: true, force: true })
  })
  return { runtime }
}

/** CPU seconds of the Postgres backends serving the store's pool (not `database.query`'s own). */
const backendCpu = async (database: BenchDatabase) => {
  const backends = await database.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
  )
  return backends.reduce((sum, { pid }) => sum + processCpuSeconds(pid), 0)
}

const open = async (variant: Variant, deviceIds: ReadonlyArray<string>): Promise<Store> => {
  const { runtime, database } = await runtimeFor()
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
  return { variant, sql, run, perEvent: [], database, cpuSeconds: 0 }
}

/** Events per batch of a variant. */
const batchOf = (variant: Variant) => variant.batch ?? settings.each ?? settings.batch

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
  if (store.variant.shape !== undefined) {
    const params = store.variant.shape.params(rows, lastSeen(items))
    // Text parameters go as the writer sends them (`write`: prepared on PGlite too).
    const texts = params.every((p): p is string | null => p === null || typeof p === "string") ? params : undefined
    return store.run(texts === undefined ? Effect.asVoid(store.sql.query(store.variant.shape.text, params)) : store.sql.write(store.variant.shape.text, texts))
  }
  if (store.variant.statement) {
    return store.run(store.sql.write(INSERT_EVENTS_TOUCH_ONE_SESSION, [eventsDocument(rows), seenDocument(lastSeen(items))]))
  }
  return store.variant.touch
    ? store.run(writeRetried(store.sql, items, 0))
    : store.run(store.sql.script([{ copy: COPY_EVENTS, data: eventsCopyText(rows) }]))
}

const columns = postgresTarget
  ? ["variant", "backend CPU µs/event", "vs as migrated", "saved µs/event", "wall µs/event (median)", "p25–p75"]
  : ["variant", "µs/event (median)", "p25–p75", "vs as migrated", "saved µs/event", "events/s at this cost"]

const tableRows = (stores: ReadonlyArray<Store>, measuredEvents: number) => {
  const sorted = stores.map((s) => [...s.perEvent].sort((a, b) => a - b))
  const spread = (i: number) => `${percentile(sorted[i], 25).toFixed(1)}–${percentile(sorted[i], 75).toFixed(1)}`
  if (postgresTarget) {
    const cpu = stores.map((s) => (s.cpuSeconds * 1e6) / measuredEvents)
    return stores.map((s, i) => [
      s.variant.name,
      cpu[i].toFixed(1),
      `${(cpu[i] / cpu[0]).toFixed(2)}×`,
      i === 0 ? "–" : (cpu[0] - cpu[i]).toFixed(1),
      percentile(sorted[i], 50).toFixed(1),
      spread(i)
    ])
  }
  const base = percentile(sorted[0], 50)
  return stores.map((s, i) => {
    const m = percentile(sorted[i], 50)
    return [
      s.variant.name,
      m.toFixed(1),
      spread(i),
      `${(m / base).toFixed(2)}×`,
      i === 0 ? "–" : (base - m).toFixed(1),
      Math.round(1e6 / m).toLocaleString("en-US")
    ]
  })
}

const main = async (): Promise<number> => {
  const kind = postgresTarget ? "Postgres databases" : "PGlite stores"
  const each = settings.each === undefined ? "" : ` (${settings.each} a statement)`
  console.log(`bench:store: ${VARIANTS.length} ${kind}, ${settings.rounds} rounds of ${settings.batch} events${each} over ${settings.devices} devices each`)
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
      const cpuBefore = store.database === undefined || round < warmup ? 0 : await backendCpu(store.database)
      for (let taken = 0; taken < settings.batch; taken += size) {
        const rows = makeBatch(deviceIds, sent, Math.min(size, settings.batch - taken))
        sent += rows.length
        const started = performance.now()
        await write(store, rows)
        const us = ((performance.now() - started) * 1000) / rows.length
        if (round >= warmup) store.perEvent.push(us)
      }
      if (store.database !== undefined && round >= warmup) store.cpuSeconds += await backendCpu(store.database) - cpuBefore
    }
    if ((round + 1) % 25 === 0) process.stdout.write(`  round ${round + 1}/${settings.rounds}\n`)
  }
  // Every batch went in whole: the counts are what was sent, or the figures measured nothing.
  for (const store of stores) {
    const [{ n }] = await store.run(store.sql.query<{ n: number }>("SELECT count(*)::int AS n FROM events"))
    if (n !== settings.rounds * settings.batch) throw new Error(`${store.variant.name}: ${n} events stored, ${settings.rounds * settings.batch} sent`)
  }
  const body = tableRows(stores, (settings.rounds - warmup) * settings.batch)
  console.log(`\n${textTable(columns, body, 1)}\n`)
  if (settings.record) {
    appendFileSync(
      resultsFile,
      `\n## Store: ${utcDate()}\n\n` +
        `Machine: ${machine()}. Voltaic at ${gitState(benchRoot, ["src", "migrations"])}. ${
          postgresTarget
            ? "The Postgres server on this machine (the writer's statements for a Postgres server: `INSERT_EVENTS_TOUCH`, or `INSERT_EVENTS_SEEN_ONE_BY_ONE` for a batch from at most `DEVICES_ONE_BY_ONE` devices); backend CPU from /proc (user + system)"
            : "PGlite on its own thread with a data directory on disk, as `npm start` runs it"
        }; ` +
        `each variant on its own new database; ${settings.rounds} rounds of ${settings.batch} events${each} over ${settings.devices} devices per variant, alternated, ` +
        `the first ${warmup} left out. A batch is timed from its send to its answer.${
          postgresTarget ? "" : ` "events/s at this cost" is what the store's thread alone could take.`
        }\n\n` +
        `${markdownTable(columns, body, 1)}\n`
    )
    console.log(`appended to ${resultsFile}`)
  }
  return 0
}

runMain("bench:store", 20 * 60_000, main)
