/**
 * `npm run bench:energy`: loads hourly electricity readings through the bulk import
 * (`POST /v1/energy/electricity/readings`, NDJSON) into Voltaic on Postgres and on PGlite,
 * then times four queries answered from the rollups and, in the same run, from raw
 * readings only (`rollups=false`), checking both give the same figures. The server runs
 * in its own process on a fresh database; this process generates the load, measures and
 * reports. On Postgres it also reports the disk the readings and each rollup take per
 * million readings, beside TimescaleDB's published compression. Prints the tables and
 * appends them to `bench/RESULTS.md`.
 *
 * Targets: `postgres` (the schema as migrated: raw readings under the plain `(series_id,
 * timestamp)` index of migrations/0005), `postgres-covering` (a variant, not shipped: the same
 * index carrying the quantity, `INCLUDE (quantity)`, put in place before the load, as the
 * 0015 measured at 100M and left out did), `pglite`.
 *
 * Settings (environment): BENCH_TARGETS (postgres,pglite; postgres-covering named only), BENCH_DEVICES (1000),
 * BENCH_SPACES (10), BENCH_HOURS (10000: 10,000,000 readings over ~14 months), BENCH_PGLITE_DEVICES
 * (as many: PGlite, in memory, holds the same 10M), BENCH_BATCH rows per request (10000),
 * BENCH_IN_FLIGHT requests (2), BENCH_ITERATIONS per query (30), BENCH_RAW_SECONDS time box
 * of each raw-readings case (20), BENCH_PG_ADMIN_URL (postgres://postgres@127.0.0.1:5432/test),
 * BENCH_WATCHDOG_MINUTES (30, or half a minute per million readings loaded if more),
 * BENCH_NO_RECORD (set: do not append to RESULTS.md), BENCH_CPU_PROF (a directory: run the Voltaic
 * servers with `--cpu-prof` into it).
 *
 * 100M readings on Postgres (`npm run bench:energy:100m`): BENCH_TARGETS=postgres
 * BENCH_DEVICES=10000 BENCH_SPACES=100 BENCH_BATCH=100000 — ten times the devices over the same
 * 10,000 hours, a space holding 100 devices as at 10M (queries (a)–(c) answer the same sizes),
 * and every device's ten hours per request as at 10M (one daily rollup row per device and request).
 */
import { randomBytes } from "node:crypto"
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs"
import { cpus } from "node:os"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import {
  type Child,
  createBenchDatabase,
  intSetting,
  machine,
  machineCores,
  machineTicks,
  markdownTable,
  onShutdown,
  parallel,
  postgresCpuSeconds,
  processCpuSeconds,
  runMain,
  serverNodeFlags,
  start,
  stop,
  textTable,
  utcDate,
  voltaicEnv
} from "./harness.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const resultsFile = resolve(root, "bench/RESULTS.md")

const settings = {
  targets: (process.env.BENCH_TARGETS ?? "postgres,pglite").split(",").map((t) => t.trim()).filter((t) => t !== ""),
  devices: intSetting("BENCH_DEVICES", 1000, 10),
  pgliteDevices: intSetting("BENCH_PGLITE_DEVICES", intSetting("BENCH_DEVICES", 1000, 10), 10),
  spaces: intSetting("BENCH_SPACES", 10, 1),
  hours: intSetting("BENCH_HOURS", 10_000, 24 * 32),
  batch: intSetting("BENCH_BATCH", 10_000, 1),
  inFlight: intSetting("BENCH_IN_FLIGHT", 2, 1),
  iterations: intSetting("BENCH_ITERATIONS", 30, 3),
  rawSeconds: intSetting("BENCH_RAW_SECONDS", 20, 1),
  pgAdminUrl: process.env.BENCH_PG_ADMIN_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  record: process.env.BENCH_NO_RECORD === undefined
}

/** Readings the run loads over all its targets. */
const loadedReadings = () =>
  settings.targets.reduce((n, t) => n + (t === "pglite" ? settings.pgliteDevices : settings.devices) * settings.hours, 0)

const HOST = "127.0.0.1"
const APP_KEY = `a_sk_bench${randomBytes(18).toString("base64url")}`
/** The readings start on 2025-01-01T00:00Z, one per device and hour. */
const START = Date.UTC(2025, 0, 1)
const HOUR = 3_600_000
const DAY = 86_400_000
const TIMEZONE = "Europe/Dublin"
const COUNTRIES = ["IRL", "GBR", "FRA", "DEU", "ESP"]
const AIMS = { postgres: { importPerSecond: 200_000, p50Ms: 50 }, pglite: { p50Ms: 250 } }
const WATCHDOG_MS = intSetting("BENCH_WATCHDOG_MINUTES", Math.max(30, Math.ceil(loadedReadings() / 2_000_000)), 1) * 60_000

/**
 * TimescaleDB's own published compression, the reference for the disk the readings take: "reduce your chunk size
 * by more than 90%" and hypercore "typically reducing storage by 90–98%". Applied here to the raw readings' bytes
 * (Postgres rows, as TimescaleDB's rowstore holds them) it gives what that compression would leave of them.
 */
const TIMESCALE = {
  low: 0.90,
  high: 0.98,
  sources: [
    "https://www.tigerdata.com/docs/use-timescale/latest/compression/about-compression",
    "https://tigerdata.com/docs/build/how-to/basic-compression"
  ]
}

/** A Node child process in the repository root. */
const node = (name: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv): Child =>
  start(name, process.execPath, args, { cwd: root, env })

// ---------------------------------------------------------------------------------------
// The server under test

/** The index of the raw readings: the plain one the migrations make (0005), or one with their quantity (the variant). */
type Layout = "covering" | "plain"

interface Target {
  readonly name: "Postgres" | "Postgres, covering index" | "PGlite"
  readonly layout: Layout
  /** Disk per relation after the load and VACUUM (Postgres only). */
  readonly disk: () => Promise<ReadonlyArray<Relation> | undefined>
  /** The Postgres database of the run (undefined for PGlite, which runs inside the server). */
  readonly database: string | undefined
  readonly child: Child
  readonly url: string
  readonly devices: number
  /** VACUUM ANALYZE as autovacuum would after a load (Postgres only). */
  readonly settle: () => Promise<void>
  readonly close: () => Promise<void>
}

const startServer = async (
  name: Target["name"],
  databaseUrl: string,
  database: string | undefined,
  devices: number,
  layout: Layout,
  settle: () => Promise<void>,
  disk: () => Promise<ReadonlyArray<Relation> | undefined>,
  cleanup: () => Promise<void>
): Promise<Target> => {
  const env = voltaicEnv(HOST, APP_KEY, databaseUrl)
  const profile = process.env.BENCH_CPU_PROF === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`]
  const child = node(`voltaic (${name})`, [...serverNodeFlags, ...profile, "--import", "tsx", "src/main.ts"], env)
  const close = onShutdown(async () => {
    await stop(child, 10_000)
    await cleanup()
  })
  const [, port] = await child.waitForLine(/http listening on [\d.]+:(\d+)/, 120_000)
  return { name, layout, database, child, url: `http://${HOST}:${port}`, devices, settle, disk, close }
}

/** One table's disk after the load: rows (from ANALYZE), heap, indexes and all (with TOAST), in bytes. */
interface Relation {
  readonly table: string
  readonly rows: number
  readonly heap: number
  readonly indexes: number
  readonly total: number
}

const ENERGY_TABLES = ["energy_readings", "energy_hourly", "energy_daily"] as const

const startPostgres = (layout: Layout) => async (): Promise<Target> => {
  const db = await createBenchDatabase(settings.pgAdminUrl)
  const drop = onShutdown(db.drop)
  const settle = async () => {
    await db.query("VACUUM ANALYZE")
  }
  const disk = async () => {
    const rows = await db.query<{ table: string; rows: string; heap: string; indexes: string; total: string }>(
      `SELECT t.name AS table, c.reltuples::int8::text AS rows, pg_relation_size(c.oid)::text AS heap,
         pg_indexes_size(c.oid)::text AS indexes, pg_total_relation_size(c.oid)::text AS total
       FROM unnest($1::text[]) WITH ORDINALITY AS t(name, i) JOIN pg_class c ON c.oid = t.name::regclass ORDER BY t.i`,
      [ENERGY_TABLES]
    )
    return rows.map((r) => ({ table: r.table, rows: Number(r.rows), heap: Number(r.heap), indexes: Number(r.indexes), total: Number(r.total) }))
  }
  const target = await startServer(layout === "plain" ? "Postgres" : "Postgres, covering index", db.url, db.name, settings.devices, layout, settle, disk, drop)
  if (layout === "covering") {
    // The server has migrated the empty database: the variant's index in place of 0005's.
    await db.query("DROP INDEX energy_readings_series_time")
    await db.query("CREATE INDEX energy_readings_series_time ON energy_readings (series_id, timestamp) INCLUDE (quantity)")
  }
  const [index] = await db.query<{ def: string }>("SELECT pg_get_indexdef('energy_readings_series_time'::regclass) AS def")
  if (index.def.includes("INCLUDE") !== (layout === "covering")) throw new Error(`${target.name}: unexpected index ${index.def}`)
  return target
}

const startPglite = () =>
  startServer("PGlite", "memory://", undefined, settings.pgliteDevices, "plain", async () => {}, async () => undefined, async () => {})

// ---------------------------------------------------------------------------------------
// REST

const call = async (
  target: Target,
  method: string,
  path: string,
  body?: string,
  contentType = "application/json",
  signal?: AbortSignal
): Promise<unknown> => {
  const response = await fetch(`${target.url}/v1${path}`, {
    method,
    headers: body === undefined ? { authorization: `Bearer ${APP_KEY}` } : { authorization: `Bearer ${APP_KEY}`, "content-type": contentType },
    body,
    signal
  })
  const text = await response.text()
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text.slice(0, 500)}`)
  return JSON.parse(text)
}

const idOf = (value: unknown): string => {
  if (typeof value === "object" && value !== null && "id" in value && typeof value.id === "string") return value.id
  throw new Error(`no id in ${JSON.stringify(value)}`)
}

interface Fleet {
  readonly spaces: ReadonlyArray<string>
  readonly devices: ReadonlyArray<string>
}

const seed = async (target: Target): Promise<Fleet> => {
  const spaces = await parallel(settings.spaces, 4, async (i) =>
    idOf(await call(target, "POST", "/spaces", JSON.stringify({ name: `bench space ${i}`, timezone: TIMEZONE, country: COUNTRIES[i % COUNTRIES.length] }))))
  const devices = await parallel(target.devices, 8, async (i) =>
    idOf(await call(target, "POST", "/devices", JSON.stringify({ name: `meter ${i}`, space: { id: spaces[i % spaces.length] } }))))
  return { spaces, devices }
}

// ---------------------------------------------------------------------------------------
// Loading

/** kWh in the hour: a daily shape per device, exact to the Wh. */
const consumption = (device: number, hour: number): string => {
  const hourOfDay = hour % 24
  const base = 200 + ((device * 37) % 300) + (hourOfDay >= 7 && hourOfDay < 22 ? 400 : 0) + ((device * 7919 + hour * 104_729) % 500)
  return (base / 1000).toFixed(3)
}

interface Load {
  readonly readings: number
  readonly seconds: number
  readonly serverCores: number
  readonly databaseCores: number | undefined
  readonly machineCores: number
}

const progress = (done: number, total: number, startedAt: number) => {
  const seconds = (performance.now() - startedAt) / 1000
  const rate = done / Math.max(seconds, 1e-3)
  const width = 30
  const filled = Math.round((done / total) * width)
  const eta = rate > 0 ? (total - done) / rate : 0
  const line = `  [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${(100 * done / total).toFixed(1).padStart(5)}% ` +
    `${done.toLocaleString("en-US")}/${total.toLocaleString("en-US")} readings, ${Math.round(rate).toLocaleString("en-US")}/s, ETA ${Math.ceil(eta)} s`
  if (process.stdout.isTTY) process.stdout.write(`\r${line}`)
  else if (done === total || Math.floor(done / total * 10) !== Math.floor((done - settings.batch) / total * 10)) console.log(line)
}

/**
 * Time-major NDJSON batches (every device's readings of a few hours per request), as
 * meters report: consecutive requests touch the same daily rollup rows, which is the
 * contended case; `inFlight` requests overlap.
 */
const load = async (target: Target, fleet: Fleet): Promise<Load> => {
  const total = fleet.devices.length * settings.hours
  const hoursPerBatch = Math.max(1, Math.floor(settings.batch / fleet.devices.length))
  const lines = fleet.devices.map((id) => `{"device":"${id}","timestamp":`)
  let done = 0
  const startedAt = performance.now()
  const serverBefore = processCpuSeconds(target.child.process.pid)
  const database = target.database
  const databaseBefore = database === undefined ? undefined : postgresCpuSeconds(database)
  const machineBefore = machineTicks()
  const batches: Array<number> = []
  for (let h = 0; h < settings.hours; h += hoursPerBatch) batches.push(h)
  await parallel(batches.length, settings.inFlight, async (b) => {
    const from = batches[b]
    const to = Math.min(from + hoursPerBatch, settings.hours)
    const parts: Array<string> = []
    for (let h = from; h < to; h++) {
      const at = START + h * HOUR
      for (let d = 0; d < lines.length; d++) parts.push(`${lines[d]}${at},"value":${consumption(d, h)}}`)
    }
    const outcome = await call(target, "POST", "/energy/electricity/readings", parts.join("\n"), "application/x-ndjson")
    if (typeof outcome !== "object" || outcome === null || !("stored" in outcome) || outcome.stored !== parts.length) {
      throw new Error(`import answered ${JSON.stringify(outcome)} for ${parts.length} rows`)
    }
    done += parts.length
    progress(done, total, startedAt)
  })
  if (process.stdout.isTTY) process.stdout.write("\n")
  const seconds = (performance.now() - startedAt) / 1000
  const machineAfter = machineTicks()
  const databaseAfter = database === undefined ? undefined : postgresCpuSeconds(database)
  return {
    readings: total,
    seconds,
    serverCores: (processCpuSeconds(target.child.process.pid) - serverBefore) / seconds,
    databaseCores: databaseBefore === undefined || databaseAfter === undefined ? undefined : (databaseAfter - databaseBefore) / seconds,
    machineCores: machineCores(machineBefore, machineAfter)
  }
}

// ---------------------------------------------------------------------------------------
// Queries

interface QueryCase {
  readonly id: string
  readonly description: string
  /** The path of iteration `i` (rotating spaces and days so caches do not answer alone). */
  readonly path: (fleet: Fleet, i: number) => string
}

const iso = (t: number) => new Date(t).toISOString()
/** The data covers START … START + hours; every case stays inside it. */
const lastDay = () => Math.floor(settings.hours / 24) - 1

const cases: ReadonlyArray<QueryCase> = [
  {
    id: "a",
    description: "a space, hourly, 30 days",
    path: (fleet, i) => {
      const since = START + ((i * 7) % Math.max(1, lastDay() - 30)) * DAY
      return `/energy/electricity?space.id=${fleet.spaces[i % fleet.spaces.length]}&since=${iso(since)}&until=${iso(since + 30 * DAY)}&interval=1%20hour`
    }
  },
  {
    id: "b",
    description: `a space, daily, 365 days in ${TIMEZONE}`,
    path: (fleet, i) =>
      `/energy/electricity?space.id=${fleet.spaces[i % fleet.spaces.length]}&since=2025-01-01T00:00:00Z&until=2026-01-01T00:00:00Z&interval=1%20day&timezone=${TIMEZONE}`
  },
  {
    id: "c",
    description: "a space's devices (breakdown), hourly, one day",
    path: (fleet, i) => {
      const day = START + ((i * 13) % lastDay()) * DAY
      return `/energy/electricity?space.id=${fleet.spaces[i % fleet.spaces.length]}&since=${day}&until=${day + DAY}&breakdown=device`
    }
  },
  {
    id: "d",
    description: `the organisation, monthly, one year in ${TIMEZONE}`,
    path: (_, i) => {
      const year = i % 2 === 0 ? ["2025-01-01", "2026-01-01"] : ["2025-02-01", "2026-02-01"]
      return `/energy/electricity?since=${year[0]}T00:00:00Z&until=${year[1]}T00:00:00Z&interval=1%20month&timezone=${TIMEZONE}`
    }
  }
]

interface Timing {
  readonly p50: number
  readonly p95: number
  readonly samples: number
  /** A request outlived RAW_TIMEOUT_MS: the figures are lower bounds. */
  readonly timedOut: boolean
}

/**
 * A raw-readings request still unanswered after this long is given up (the case's raw runs end there and its figures
 * are reported as "> 120000.0"), so one slow raw query cannot fail the whole run (fetch gives up on headers after 300 s).
 */
const RAW_TIMEOUT_MS = 120_000

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]

const timed = async (target: Target, path: string, signal?: AbortSignal): Promise<{ ms: number; body: unknown }> => {
  const t0 = performance.now()
  const body = await call(target, "GET", path, undefined, undefined, signal)
  return { ms: performance.now() - t0, body }
}

interface CaseResult {
  readonly target: string
  readonly layout: Layout
  readonly query: QueryCase
  readonly rollups: Timing
  readonly raw: Timing
  readonly buckets: number
}

const measureCase = async (target: Target, fleet: Fleet, query: QueryCase): Promise<CaseResult> => {
  process.stdout.write(`  (${query.id}) ${query.description.padEnd(50)} `)
  const rollups: Array<number> = []
  const raw: Array<number> = []
  let buckets = 0
  let rawTimedOut = false
  for (let i = 0; i < 3; i++) await timed(target, query.path(fleet, i))
  for (let i = 0; i < settings.iterations; i++) {
    const { ms, body } = await timed(target, query.path(fleet, i))
    rollups.push(ms)
    if (typeof body === "object" && body !== null && "result" in body && Array.isArray(body.result)) buckets = body.result.length
  }
  // Raw readings: as many paths as fit the time box, each checked against the rollups' answer. Paths after the ones
  // timed above (other days and spaces), so raw readings are not timed on the pages those requests just read.
  const startedAt = performance.now()
  for (let i = 0; i < settings.iterations && (raw.length < 3 || performance.now() - startedAt < settings.rawSeconds * 1000); i++) {
    const path = query.path(fleet, settings.iterations + 3 + i)
    let fromRaw: { ms: number; body: unknown }
    try {
      fromRaw = await timed(target, `${path}&rollups=false`, AbortSignal.timeout(RAW_TIMEOUT_MS))
    } catch (error) {
      if (!(error instanceof Error && error.name === "TimeoutError")) throw error
      raw.push(RAW_TIMEOUT_MS)
      rawTimedOut = true
      break
    }
    raw.push(fromRaw.ms)
    const fromRollups = await call(target, "GET", path)
    if (JSON.stringify(fromRaw.body) !== JSON.stringify(fromRollups)) {
      throw new Error(`${target.name} (${query.id}): raw readings and rollups disagree for ${path}`)
    }
  }
  const stats = (values: Array<number>, timedOut: boolean): Timing => {
    const sorted = [...values].sort((a, b) => a - b)
    return { p50: percentile(sorted, 0.5), p95: percentile(sorted, 0.95), samples: sorted.length, timedOut }
  }
  const result = { target: target.name, layout: target.layout, query, rollups: stats(rollups, false), raw: stats(raw, rawTimedOut), buckets }
  console.log(`rollups p50 ${result.rollups.p50.toFixed(1)} ms, raw p50 ${timing(result.raw, "p50")} ms`)
  return result
}

// ---------------------------------------------------------------------------------------
// Reporting

const ms = (n: number) => n.toFixed(1)
/** A percentile of a timing, "> n" when a request of its runs timed out and it may be one of them. */
const timing = (t: Timing, p: "p50" | "p95") => (t.timedOut && t[p] >= RAW_TIMEOUT_MS ? `> ${ms(RAW_TIMEOUT_MS)}` : ms(t[p]))
const times = (t: Timing, over: number) => `${t.timedOut && t.p50 >= RAW_TIMEOUT_MS ? "> " : ""}${(t.p50 / over).toFixed(1)}×`
const cores = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? "–" : n.toFixed(2))

const importColumns = ["target", "devices", "readings", "seconds", "readings/s", "server CPU", "Postgres CPU", "machine CPU"]
const importRows = (loads: ReadonlyArray<Loaded>) =>
  loads.map(({ target, load }) => [
    target.name,
    target.devices.toLocaleString("en-US"),
    load.readings.toLocaleString("en-US"),
    load.seconds.toFixed(1),
    Math.round(load.readings / load.seconds).toLocaleString("en-US"),
    cores(load.serverCores),
    cores(load.databaseCores),
    `${cores(load.machineCores)}/${cpus().length}`
  ])

const queryColumns = ["target", "query", "buckets", "rollups p50 ms", "rollups p95 ms", "raw p50 ms", "raw p95 ms", "raw runs", "raw/rollups (p50)"]
const queryRows = (results: ReadonlyArray<CaseResult>) =>
  results.map((r) => [
    r.target,
    `(${r.query.id}) ${r.query.description}`,
    String(r.buckets),
    ms(r.rollups.p50),
    ms(r.rollups.p95),
    timing(r.raw, "p50"),
    timing(r.raw, "p95"),
    String(r.raw.samples),
    times(r.raw, r.rollups.p50)
  ])

// Disk

interface Loaded {
  readonly target: Target
  readonly load: Load
  readonly disk: ReadonlyArray<Relation> | undefined
}

const MB = 1_000_000
/** Bytes per million readings loaded, in MB (10^6 bytes). */
const perMillion = (bytes: number, readings: number) => `${(bytes / (readings / 1_000_000) / MB).toFixed(1)} MB`
const percent = (part: number, whole: number) => `${(100 * part / whole).toFixed(1)}%`

const diskColumns = ["target", "table", "rows", "heap MB", "indexes MB", "total MB", "total per million readings", "of raw readings"]
const diskRows = (loads: ReadonlyArray<Loaded>) =>
  loads.flatMap(({ target, load, disk }) => {
    if (disk === undefined) return []
    const raw = disk.find((r) => r.table === "energy_readings")!
    return disk.map((r) => [
      target.name,
      r.table,
      r.rows.toLocaleString("en-US"),
      (r.heap / MB).toFixed(1),
      (r.indexes / MB).toFixed(1),
      (r.total / MB).toFixed(1),
      perMillion(r.total, load.readings),
      r === raw ? "–" : percent(r.total, raw.total)
    ])
  })

/** Raw against rolled up against TimescaleDB's published compression applied to the raw bytes, per target. */
const diskSummary = (loads: ReadonlyArray<Loaded>): Array<string> =>
  loads.flatMap(({ target, load, disk }) => {
    if (disk === undefined) return []
    const raw = disk.find((r) => r.table === "energy_readings")!.total
    const rolled = disk.filter((r) => r.table !== "energy_readings").reduce((n, r) => n + r.total, 0)
    const low = raw * (1 - TIMESCALE.low)
    const high = raw * (1 - TIMESCALE.high)
    return [
      `${target.name}: raw readings ${perMillion(raw, load.readings)} per million readings (table and index), the hourly and daily ` +
      `rollups ${perMillion(rolled, load.readings)} (${percent(rolled, raw)} of raw, raw/rolled up ${(raw / rolled).toFixed(1)}×); ` +
      `TimescaleDB's published compression (${Math.round(TIMESCALE.low * 100)}–${Math.round(TIMESCALE.high * 100)}% smaller) would leave ` +
      `${perMillion(low, load.readings)}–${perMillion(high, load.readings)} of the raw readings: raw is ` +
      `${(raw / low).toFixed(0)}–${(raw / high).toFixed(0)}× that, the rollups ${(rolled / low).toFixed(2)}–${(rolled / high).toFixed(2)}× it.`
    ]
  })

// Layouts: the covering index (the variant) against the plain one (0005, shipped), both loaded in this run.

const layoutColumns = ["measure", "covering index (variant)", "plain index (0005)", "covering/plain"]
const layoutRows = (loads: ReadonlyArray<Loaded>, results: ReadonlyArray<CaseResult>): Array<Array<string>> => {
  const covering = loads.find((l) => l.target.layout === "covering")
  const plain = loads.find((l) => l.target.name === "Postgres")
  if (covering === undefined || plain === undefined) return []
  const rate = (l: Loaded) => l.load.readings / l.load.seconds
  const rows: Array<Array<string>> = [[
    "import readings/s",
    Math.round(rate(covering)).toLocaleString("en-US"),
    Math.round(rate(plain)).toLocaleString("en-US"),
    `${(rate(covering) / rate(plain)).toFixed(2)}×`
  ]]
  for (const query of cases) {
    const c = results.find((r) => r.target === covering.target.name && r.query.id === query.id)
    const p = results.find((r) => r.target === plain.target.name && r.query.id === query.id)
    if (c === undefined || p === undefined) continue
    rows.push([`(${query.id}) rollups p50 ms`, ms(c.rollups.p50), ms(p.rollups.p50), `${(c.rollups.p50 / p.rollups.p50).toFixed(2)}×`])
    const censored = c.raw.timedOut || p.raw.timedOut
    rows.push([`(${query.id}) raw p50 ms`, timing(c.raw, "p50"), timing(p.raw, "p50"), censored ? "–" : `${(c.raw.p50 / p.raw.p50).toFixed(2)}×`])
  }
  const rawOf = (l: Loaded) => l.disk?.find((r) => r.table === "energy_readings")
  const cr = rawOf(covering)
  const pr = rawOf(plain)
  if (cr !== undefined && pr !== undefined) {
    rows.push([
      "raw readings' index per million readings",
      perMillion(cr.indexes, covering.load.readings),
      perMillion(pr.indexes, plain.load.readings),
      `${(cr.indexes / covering.load.readings / (pr.indexes / plain.load.readings)).toFixed(2)}×`
    ])
    rows.push([
      "raw readings (table and index) per million readings",
      perMillion(cr.total, covering.load.readings),
      perMillion(pr.total, plain.load.readings),
      `${(cr.total / covering.load.readings / (pr.total / plain.load.readings)).toFixed(2)}×`
    ])
  }
  return rows
}

const verdicts = (loads: ReadonlyArray<Loaded>, results: ReadonlyArray<CaseResult>): Array<string> => {
  const out: Array<string> = []
  const pgLoad = loads.find((l) => l.target.name === "Postgres")
  if (pgLoad !== undefined) {
    const rate = pgLoad.load.readings / pgLoad.load.seconds
    out.push(`Aim (Postgres import ≥ ${AIMS.postgres.importPerSecond.toLocaleString("en-US")} readings/s): **${rate >= AIMS.postgres.importPerSecond ? "met" : "not met"}** — ${Math.round(rate).toLocaleString("en-US")}/s.`)
  }
  for (const [name, aim] of [["Postgres", AIMS.postgres.p50Ms], ["Postgres, covering index", AIMS.postgres.p50Ms], ["PGlite", AIMS.pglite.p50Ms]] as const) {
    const mine = results.filter((r) => r.target === name)
    if (mine.length === 0) continue
    const worst = mine.reduce((a, b) => (b.rollups.p50 > a.rollups.p50 ? b : a))
    out.push(`Aim (${name}, every query p50 ≤ ${aim} ms): **${worst.rollups.p50 <= aim ? "met" : "not met"}** — slowest (${worst.query.id}) at ${ms(worst.rollups.p50)} ms.`)
  }
  return out
}

const loadAverage = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")

const HEADER = "# Benchmarks\n"

const record = (date: string, loads: ReadonlyArray<Loaded>, results: ReadonlyArray<CaseResult>, loadBefore: string) => {
  if (!existsSync(resultsFile)) writeFileSync(resultsFile, HEADER)
  const pgliteScale = settings.pgliteDevices === settings.devices
    ? ""
    : `  PGlite holds ${settings.pgliteDevices} devices (${(settings.pgliteDevices * settings.hours).toLocaleString("en-US")} readings; BENCH_PGLITE_DEVICES).\n`
  const section = `
## Energy — ${date}

\`npm run bench:energy\` (bench/energy.ts). Machine: ${machine()}; Postgres on the same machine, sharing its
cores; load average ${loadBefore} when the run started (other work shares this machine).

- Load: ${settings.spaces} spaces (${TIMEZONE}, countries ${COUNTRIES.join("/")}), hourly electricity readings from 2025-01-01 for
  ${settings.hours.toLocaleString("en-US")} hours (~${(settings.hours / 730).toFixed(1)} months) per device, through \`POST /v1/energy/electricity/readings\`
  as NDJSON, ${settings.batch.toLocaleString("en-US")} rows per request (every device, a few hours: time-major), ${settings.inFlight} requests in flight.
${pgliteScale}- CPU columns are cores used during the load: server = the Voltaic process (with PGlite inside it), Postgres = the
  backends of the run's database, machine = everything on the machine.
- Postgres is \`VACUUM ANALYZE\`d after the load, as autovacuum would have done; PGlite is measured as loaded, with whatever its own once-a-minute pass (src/store/maintenance.ts) vacuumed and analysed meanwhile.
- Queries: one at a time over HTTP from this process, ${settings.iterations} timed runs after 3 warm-ups, rotating spaces and
  days; "raw" is the same request with \`rollups=false\` (answered from raw readings only), time-boxed to
  ${settings.rawSeconds} s per case, over the paths after the timed rollups ones (other days and spaces: not the pages
  those just read), and each raw answer is checked equal to the rollups' answer; a raw request unanswered after
  ${RAW_TIMEOUT_MS / 1000} s ends its case's raw runs, its figures then lower bounds ("> ${ms(RAW_TIMEOUT_MS)}").

${markdownTable(importColumns, importRows(loads), 1)}

${markdownTable(queryColumns, queryRows(results), 2)}
${layoutRows(loads, results).length === 0 ? "" : `
Raw readings indexed with their quantity (\`postgres-covering\`, a variant not shipped) against the plain
\`(series_id, timestamp)\` index the migrations make (\`postgres\`), each loaded and queried in this run:

${markdownTable(layoutColumns, layoutRows(loads, results), 1)}
`}${diskRows(loads).length === 0 ? "" : `
Disk after the load and \`VACUUM ANALYZE\` (\`pg_relation_size\`, \`pg_indexes_size\`, \`pg_total_relation_size\`; rows as
ANALYZE estimates them; MB = 10^6 bytes):

${markdownTable(diskColumns, diskRows(loads), 2)}

${diskSummary(loads).map((line) => `- ${line}`).join("\n")}
- TimescaleDB's figures are its own, for its compressed columnstore against its rowstore: "reduce your chunk size by more
  than 90%" (${TIMESCALE.sources[0]}), "typically reducing storage by 90–98%"
  (${TIMESCALE.sources[1]}); applying them to these rows is an estimate, not a measurement.
`}
${verdicts(loads, results).join("\n")}
`
  appendFileSync(resultsFile, section)
}

// ---------------------------------------------------------------------------------------

const main = async () => {
  const starters: Record<string, () => Promise<Target>> = {
    postgres: startPostgres("plain"),
    "postgres-covering": startPostgres("covering"),
    pglite: startPglite
  }
  const unknown = settings.targets.filter((t) => !(t in starters))
  if (unknown.length > 0) throw new Error(`BENCH_TARGETS: unknown ${unknown.join(", ")}; use postgres, postgres-covering, pglite`)
  const date = utcDate()
  const loadBefore = loadAverage()
  console.log(`bench:energy — ${machine()}, load average ${loadBefore}\n`)
  const loads: Array<Loaded> = []
  const results: Array<CaseResult> = []
  for (const name of settings.targets) {
    process.stdout.write(`${name}: starting… `)
    const target = await starters[name]()
    try {
      const fleet = await seed(target)
      console.log(`${fleet.spaces.length} spaces, ${fleet.devices.length} devices`)
      const loaded = await load(target, fleet)
      console.log(`  ${loaded.readings.toLocaleString("en-US")} readings in ${loaded.seconds.toFixed(1)} s: ${Math.round(loaded.readings / loaded.seconds).toLocaleString("en-US")} readings/s`)
      const settledAt = performance.now()
      await target.settle()
      if (target.database !== undefined) console.log(`  VACUUM ANALYZE: ${((performance.now() - settledAt) / 1000).toFixed(1)} s`)
      const disk = await target.disk()
      loads.push({ target, load: loaded, disk })
      if (disk !== undefined) for (const line of diskSummary([{ target, load: loaded, disk }])) console.log(`  ${line}`)
      for (const query of cases) results.push(await measureCase(target, fleet, query))
    } finally {
      await target.close()
    }
  }
  console.log(`\n${textTable(importColumns, importRows(loads), 1)}\n\n${textTable(queryColumns, queryRows(results), 2)}\n`)
  if (layoutRows(loads, results).length > 0) console.log(`${textTable(layoutColumns, layoutRows(loads, results), 1)}\n`)
  if (diskRows(loads).length > 0) console.log(`${textTable(diskColumns, diskRows(loads), 2)}\n`)
  for (const line of verdicts(loads, results)) console.log(line.replaceAll("**", ""))
  if (settings.record) {
    record(date, loads, results, loadBefore)
    console.log(`\nappended to ${resultsFile}`)
  }
  return 0
}

runMain("bench:energy", WATCHDOG_MS, main)
