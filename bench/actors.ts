/**
 * `npm run bench:actors`: the device actors at 100,000 devices (issue 5).
 *
 * Two parts, each in its own Node process started with `npm start`'s Node flags and `--expose-gc` (so that heap
 * measurements start from a clean heap and one part's garbage never lands in the other's):
 *
 * - pure: `deviceMachine` actors without the cluster or any I/O. Heap per live actor
 *   (held in a `Map` by device id, as a device bucket holds them), activation time (create,
 *   subscribe, start, first `device.seen`), `device.seen` events/s, the persisted snapshot's
 *   size, heap left behind by passivated actors (snapshot taken, actor stopped, dropped), and
 *   activation from a snapshot (what a bucket does when a passivated device returns).
 * - buckets (postgres, and pglite if asked): CoreLive in-process on a fresh store, its device
 *   buckets on the cluster's runner (src/entities/DeviceBucket.ts); devices
 *   seeded with bulk SQL; activity fed through the in-process `Activity` service, as Ingest
 *   does. Activation of BENCH_DEVICES devices, then BENCH_SILENT of them are seen in one burst
 *   and fall silent at once: the lateness of each offline alert is measured against its
 *   deadline (last seen + afterSeconds), to the `alerts` row (`created_at`) and to its delivery
 *   on the in-process bus. Then events/s through the buckets to hosted actors, heap per
 *   hosted actor, passivation of BENCH_PASSIVATED devices (heap left behind, `device_actors`
 *   row and index entry) and their re-activation from the snapshot.
 *
 * Prints the tables and appends them to `bench/RESULTS.md`.
 *
 * Settings (environment): BENCH_DEVICES live actors (100000), BENCH_SILENT devices that fall
 * silent at once (10000), BENCH_PASSIVATED devices passivated by their buckets (10000;
 * the first tenth warms the path up and is not measured),
 * BENCH_OFFLINE_AFTER afterSeconds of their offline rule (30; longer than the activation of
 * the silent devices takes, so that none of them goes offline before the burst),
 * BENCH_ROUNDS `device.seen` per pure actor (5), BENCH_EVENTS events through the buckets
 * (200000), BENCH_PARTS (pure,postgres; also pglite), BENCH_PG_ADMIN_URL (the server and a
 * database to connect to for CREATE DATABASE; postgres://postgres@127.0.0.1:5432/test),
 * BENCH_NO_RECORD (set: do not append to RESULTS.md), BENCH_CHILD_LOG (a file: each part's log,
 * warnings included, is appended to it), BENCH_NODE_FLAGS (more node flags for each part, space-separated,
 * e.g. `--trace-gc`; after the package's own, so they win), BENCH_PEER (a checkout of an earlier commit: each store
 * part is run again with that commit's bench/actors.ts, in the same run, its rows labelled with
 * the commit).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { appendFileSync, readFileSync, writeFileSync } from "node:fs"
import { cpus, loadavg, totalmem } from "node:os"
import { resolve } from "node:path"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import { ConfigProvider, Context, Effect, Exit, Layer, Scope } from "effect"
import postgres from "postgres"
import { type Actor, createActor } from "xstate"
import { deviceMachine } from "../actors/deviceMachine.ts"
import { makeHttpApp } from "../src/adapters/http/HttpApp.ts"
import { CoreLive } from "../src/app.ts"
import { Bus } from "../src/bus/Bus.ts"
import { newId } from "../src/domain/ids.ts"
import { Activity, type DeviceActivity } from "../src/ingest/Activity.ts"
import { Sql } from "../src/store/Sql.ts"
import { PASSIVATE_AFTER_MS } from "../src/entities/DeviceBucket.ts"
import { ResidentBuckets } from "../src/entities/residents.ts"
import { SeenSender } from "../src/entities/SeenSender.ts"
import { createBenchDatabase, intSetting, serverNodeFlags } from "./harness.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const self = fileURLToPath(import.meta.url)
const resultsFile = resolve(root, "bench/RESULTS.md")

const PARTS = ["pure", "postgres", "pglite"] as const
type Part = (typeof PARTS)[number]
const isPart = (s: string): s is Part => (PARTS as ReadonlyArray<string>).includes(s)

const settings = {
  devices: intSetting("BENCH_DEVICES", 100_000, 1_000),
  silent: intSetting("BENCH_SILENT", 10_000, 100),
  passivated: intSetting("BENCH_PASSIVATED", 10_000, 100),
  offlineAfterSeconds: intSetting("BENCH_OFFLINE_AFTER", 30, 1),
  rounds: intSetting("BENCH_ROUNDS", 5, 1),
  events: intSetting("BENCH_EVENTS", 200_000, 1_000),
  analyzeEverySeconds: intSetting("BENCH_ANALYZE_EVERY", 10, 0),
  parts: (process.env.BENCH_PARTS ?? "pure,postgres").split(",").map((t) => t.trim()).filter((t) => t !== ""),
  pgAdminUrl: process.env.BENCH_PG_ADMIN_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  record: process.env.BENCH_NO_RECORD === undefined
}

const AIM = { kbPerActor: 10, latenessP99Ms: 1_000 }
/** Bounds the whole run, and each part, so that nothing stuck can keep it alive. */
const WATCHDOG_MS = 20 * 60_000
const PART_LIMIT_MS = 15 * 60_000

// ---------------------------------------------------------------------------------------
// Measuring helpers (used in the child processes)

/** Heap after full collections; needs `--expose-gc`. */
const heapUsed = (): number => {
  const gc = globalThis.gc
  if (gc === undefined) throw new Error("run with node --expose-gc")
  for (let i = 0; i < 4; i++) gc()
  return process.memoryUsage().heapUsed
}

const quantile = (sorted: ArrayLike<number>, q: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]

interface Spread {
  readonly p50: number
  readonly p99: number
  readonly max: number
  readonly min: number
  readonly mean: number
}

const spread = (values: ReadonlyArray<number> | Float64Array): Spread => {
  const sorted = Float64Array.from(values).sort()
  let sum = 0
  for (const v of sorted) sum += v
  return {
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    min: sorted[0] ?? Number.NaN,
    mean: sum / sorted.length
  }
}

/** Busy and total jiffies of the whole machine, from /proc/stat. */
const machineTicks = (): { busy: number; total: number } => {
  try {
    const fields = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number)
    const total = fields.reduce((a, b) => a + b, 0)
    return { busy: total - fields[3] - (fields[4] ?? 0), total }
  } catch {
    return { busy: Number.NaN, total: Number.NaN }
  }
}

interface Phase {
  readonly name: string
  readonly count: number
  readonly unit: string
  readonly seconds: number
  /** Cores used by this process (user + system) during the phase. */
  readonly nodeCores: number
  /** Cores busy on the whole machine during the phase (this run, Postgres and anything else). */
  readonly machineCores: number
  readonly note: string
}

/** Runs `f`, timing it and the CPU it and the machine used. */
const phase = async (name: string, count: number, unit: string, note: string, f: () => Promise<void>): Promise<Phase> => {
  process.stderr.write(`  ${name}… `)
  const cpu = process.cpuUsage()
  const machine = machineTicks()
  const started = performance.now()
  await f()
  const seconds = (performance.now() - started) / 1000
  const used = process.cpuUsage(cpu)
  const machineAfter = machineTicks()
  const p: Phase = {
    name,
    count,
    unit,
    seconds,
    nodeCores: (used.user + used.system) / 1e6 / seconds,
    machineCores: (machineAfter.busy - machine.busy) / (machineAfter.total - machine.total) * cpus().length,
    note
  }
  process.stderr.write(`${seconds.toFixed(1)} s, ${Math.round(count / seconds).toLocaleString("en-US")} ${unit}/s\n`)
  return p
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

/** Polls `done` every `everyMs` until it holds or `limitMs` has passed; says whether it held. */
const until = async (done: () => boolean | Promise<boolean>, limitMs: number, everyMs = 50): Promise<boolean> => {
  const deadline = Date.now() + limitMs
  for (;;) {
    if (await done()) return true
    if (Date.now() > deadline) return false
    await sleep(everyMs)
  }
}

// ---------------------------------------------------------------------------------------
// Part "pure": deviceMachine actors alone

interface PureCase {
  readonly label: string
  readonly actors: number
  readonly heapPerActor: number
  readonly rssPerActor: number
  readonly activationUs: Spread
  readonly eventsPerSecond: number
  readonly snapshotBytes: number
  readonly passivateUs: number
  readonly heapPerPassivated: number
  readonly rehydrateUs: Spread
}

interface PureResult {
  readonly cases: ReadonlyArray<PureCase>
}

const pureCase = (label: string, offlineAfterMs: number | null): PureCase => {
  const n = settings.devices
  const emitted = { count: 0 }
  const listener = () => {
    emitted.count++
  }
  const activateOne = (id: string, at: number) => {
    const actor = createActor(deviceMachine, { input: { deviceId: id, offlineAfterMs } })
    actor.on("*", listener)
    actor.start()
    actor.send({ type: "device.seen", at })
    return actor
  }
  // Warm-up: the machine's paths compiled before anything is measured.
  for (let i = 0; i < 5_000; i++) activateOne(`dev_warmup${i}`, Date.now()).stop()

  const h0 = heapUsed()
  const rss0 = process.memoryUsage().rss
  // The ids count: a bucket keeps each one as its map key and in the actor's context.
  const ids = Array.from({ length: n }, () => newId("dev"))
  const live = new Map<string, Actor<typeof deviceMachine>>()
  const activation = new Float64Array(n)
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    live.set(ids[i], activateOne(ids[i], Date.now()))
    activation[i] = (performance.now() - t) * 1000
  }
  const h1 = heapUsed()
  const rss1 = process.memoryUsage().rss
  const expected = offlineAfterMs === null ? "unwatched" : "online"
  for (const actor of live.values()) {
    if (actor.getSnapshot().value !== expected) throw new Error(`pure ${label}: an actor is ${String(actor.getSnapshot().value)}, not ${expected}`)
  }

  const started = performance.now()
  for (let r = 0; r < settings.rounds; r++) {
    const at = Date.now()
    for (const actor of live.values()) actor.send({ type: "device.seen", at })
  }
  const eventsPerSecond = (n * settings.rounds) / ((performance.now() - started) / 1000)

  // Passivation as a bucket does it: the persisted snapshot goes to the store, the actor stops.
  const snapshots = new Array<string>(n)
  const passivateStarted = performance.now()
  for (let i = 0; i < n; i++) {
    const actor = live.get(ids[i])!
    snapshots[i] = JSON.stringify(actor.getPersistedSnapshot())
    actor.stop()
    live.delete(ids[i])
  }
  const passivateUs = (performance.now() - passivateStarted) * 1000 / n
  let snapshotChars = 0
  for (const s of snapshots) snapshotChars += Buffer.byteLength(s)

  // Activation from the snapshot: what a returning, passivated device costs.
  const rehydrate = new Float64Array(n)
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    const actor = createActor(deviceMachine, { input: { deviceId: ids[i], offlineAfterMs }, snapshot: JSON.parse(snapshots[i]) })
    actor.on("*", listener)
    actor.start()
    actor.send({ type: "device.resumed", at: Date.now() })
    actor.send({ type: "device.seen", at: Date.now() })
    live.set(ids[i], actor)
    rehydrate[i] = (performance.now() - t) * 1000
  }
  for (const actor of live.values()) actor.stop()
  live.clear()
  if (emitted.count !== 0) throw new Error(`pure ${label}: ${emitted.count} unexpected emissions`)
  // Stopped and forgotten (the snapshots live in the store): whatever xstate still keeps is what is left.
  ids.length = 0
  snapshots.length = 0
  const h2 = heapUsed()

  return {
    label,
    actors: n,
    heapPerActor: (h1 - h0) / n,
    rssPerActor: (rss1 - rss0) / n,
    activationUs: spread(activation),
    eventsPerSecond,
    snapshotBytes: snapshotChars / n,
    passivateUs,
    heapPerPassivated: (h2 - h0) / n,
    rehydrateUs: spread(rehydrate)
  }
}

const runPure = async (): Promise<PureResult> => {
  process.stderr.write(`pure actors: ${settings.devices.toLocaleString("en-US")} actors per case\n`)
  const cases: Array<PureCase> = []
  for (const [label, limit] of [["watched: online, offline timer pending", 3_600_000], ["unwatched: no offline rule", null]] as const) {
    process.stderr.write(`  ${label}… `)
    const c = pureCase(label, limit)
    process.stderr.write(`${Math.round(c.heapPerActor)} B/actor, ${c.activationUs.mean.toFixed(1)} µs/activation, ${Math.round(c.eventsPerSecond)} events/s\n`)
    cases.push(c)
  }
  return { cases }
}

// ---------------------------------------------------------------------------------------
// Part "postgres" / "pglite": through the device buckets, in-process app

const BOOTSTRAP_KEY = `a_sk_bench${randomBytes(18).toString("base64url")}`

interface Lateness {
  readonly alerts: number
  readonly expected: number
  /** alerts.created_at − deadline, ms. */
  readonly row: Spread
  /** In-process bus delivery − deadline, ms. */
  readonly delivered: Spread
  /** Alerts created per second between the first and the last. */
  readonly alertsPerSecond: number
  /** Event-loop delay during the storm, ms. */
  readonly loopDelayP99Ms: number
  readonly loopDelayMaxMs: number
  /** Time the burst of `device.seen` that set the deadlines took to be applied. */
  readonly burstApplyMs: number
}

interface BucketsResult {
  readonly store: string
  readonly phases: ReadonlyArray<Phase>
  readonly hosted: number
  readonly heapPerHosted: number
  readonly heapPerPassivated: number
  readonly passivatedCount: number
  readonly db: { readonly rows: number; readonly rowBytes: number; readonly indexBytes: number; readonly snapshotBytes: number }
  readonly lateness: Lateness
  readonly autovacuum: string
  /** Seconds between the bench's own ANALYZE (autovacuum off); null: none. */
  readonly analyzeEvery: number | null
  readonly warnings: ReadonlyArray<string>
}

const createDatabase = () => createBenchDatabase(settings.pgAdminUrl)

/** What a child must undo when stopped early (the app, the Postgres database). */
let childCleanup: (() => Promise<void>) | undefined

const runBuckets = async (store: "postgres" | "pglite"): Promise<BucketsResult> => {
  const db = store === "postgres" ? await createDatabase() : undefined
  const scope = await Effect.runPromise(Scope.make())
  let done: Promise<void> | undefined
  const cleanup = () =>
    (done ??= (async () => {
      try {
        await Effect.runPromise(Scope.close(scope, Exit.void))
      } finally {
        await db?.drop()
      }
    })())
  childCleanup = cleanup
  try {
    return await supervised(store, db?.url ?? "memory://", scope)
  } finally {
    await cleanup()
  }
}

const supervised = async (store: string, databaseUrl: string, scope: Scope.Closeable): Promise<BucketsResult> => {
  const total = settings.devices
  const silentCount = Math.min(settings.silent, total)
  const steadyCount = total - silentCount
  const passivatedCount = settings.passivated
  const afterMs = settings.offlineAfterSeconds * 1000
  const warnings: Array<string> = []
  const phases: Array<Phase> = []
  process.stderr.write(`buckets on ${store}: ${total.toLocaleString("en-US")} live devices (${silentCount.toLocaleString("en-US")} fall silent), ${passivatedCount.toLocaleString("en-US")} passivated\n`)

  const provider = ConfigProvider.fromEnvRecord({
    BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
    ADMIN_EMAIL: "bench@example.com",
    ADMIN_PASSWORD: "correct horse battery",
    LOG_LEVEL: "warn",
    DATABASE_URL: databaseUrl
  })
  const context = await Effect.runPromise(Layer.buildWithScope(CoreLive.pipe(Layer.provide(ConfigProvider.layer(provider))), scope))
  const app = await Effect.runPromise(Effect.provideContext(makeHttpApp, context))
  const residents = Context.get(context, ResidentBuckets)
  const sender = Context.get(context, SeenSender)
  /** Devices held by the buckets of this process. */
  const active = () => residents.hostedDevices()
  /** Until every sign of life handed over so far was handled by its bucket (each \`Seen\` is answered once handled). */
  const settled = async () => {
    if (!(await until(() => sender.pending() === 0, 10 * 60_000, 5))) warnings.push("signs of life still on their way after 10 minutes")
  }
  const activity = Context.get(context, Activity)
  const sql = Context.get(context, Sql)
  const bus = Context.get(context, Bus)
  const query = <T>(text: string, params?: ReadonlyArray<unknown>) => Effect.runPromise(sql.query<T>(text, params))
  const call = async (method: string, path: string, body?: unknown): Promise<Record<string, unknown>> => {
    const res = await app.request(`/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${BOOTSTRAP_KEY}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    const text = await res.text()
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
    return JSON.parse(text) as Record<string, unknown>
  }
  const idOf = (value: unknown): string => {
    if (typeof value === "object" && value !== null && "id" in value && typeof value.id === "string") return value.id
    throw new Error(`no id in ${JSON.stringify(value)}`)
  }

  // Alerts delivered on the bus: first delivery per device, when it reached this process's subscriber.
  const delivered = new Map<string, number>()
  await Effect.runPromise(
    bus.onDelivery((d) => {
      if (d.topic.endsWith("/alerts") && !delivered.has(d.deviceId)) delivered.set(d.deviceId, Date.now())
    }).pipe(Scope.provide(scope))
  )

  const organisationId = idOf((await call("GET", "/whoami")).organisation)
  const silentSpace = idOf(await call("POST", "/spaces", { name: "falls silent" }))
  const steadySpace = idOf(await call("POST", "/spaces", { name: "steady" }))
  const silentRule = idOf(
    await call("POST", "/alertRules", {
      name: "silent",
      type: "offline",
      severity: "low",
      space: { id: silentSpace },
      config: { afterSeconds: settings.offlineAfterSeconds }
    })
  )
  await call("POST", "/alertRules", { name: "steady", type: "offline", severity: "low", space: { id: steadySpace }, config: { afterSeconds: 3600 } })

  // Ids: the steady devices, those that fall silent, and those passivated (in no space: no rule watches them).
  const now = Date.now()
  const steady = Array.from({ length: steadyCount }, () => newId("dev", now))
  const silent = Array.from({ length: silentCount }, () => newId("dev", now))
  const idle = Array.from({ length: passivatedCount }, () => newId("dev", now))
  const seedCount = total + passivatedCount
  phases.push(
    await phase(`seed ${seedCount.toLocaleString("en-US")} devices (bulk SQL)`, seedCount, "devices", "INSERT … SELECT FROM unnest, 10,000 a statement; then ANALYZE", async () => {
      const groups: Array<[ReadonlyArray<string>, string | null]> = [[steady, steadySpace], [silent, silentSpace], [idle, null]]
      for (const [ids, space] of groups) {
        for (let i = 0; i < ids.length; i += 10_000) {
          const chunk = ids.slice(i, i + 10_000)
          await query(
            `INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, created_at, updated_at)
             SELECT u.id, $2, $3, u.hash, u.id, $4, $4 FROM unnest($1::text[], $5::text[]) AS u(id, hash)`,
            [chunk, organisationId, space, now, chunk.map(() => randomBytes(16).toString("hex"))]
          )
        }
      }
      await query("ANALYZE")
    })
  )

  // A Postgres server with autovacuum analyzes device_actors once it has grown (50 rows + 10 %, checked
  // every minute), which replaces the generic plan that the driver's prepared activation query got while
  // the table was empty (a sequential scan of device_actors). With autovacuum off, as on the test server,
  // the bench does that analysis itself, on its own connection.
  const [{ autovacuum }] = store === "postgres" ? await query<{ autovacuum: string }>("SHOW autovacuum") : [{ autovacuum: "none (PGlite)" }]
  let analyzeEvery: number | null = null
  if (store === "postgres" && autovacuum === "off" && settings.analyzeEverySeconds > 0) {
    analyzeEvery = settings.analyzeEverySeconds
    const analyst = postgres(databaseUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 })
    let running: Promise<unknown> = Promise.resolve()
    const timer = setInterval(() => {
      running = running.then(() => analyst.unsafe("ANALYZE devices, device_actors, alerts")).catch(() => undefined)
    }, analyzeEvery * 1000)
    await Effect.runPromise(
      Scope.addFinalizer(
        scope,
        Effect.promise(async () => {
          clearInterval(timer)
          await running
          await analyst.end({ timeout: 5 })
        })
      )
    )
  }

  // A fresh copy of the id, as from a parsed message: a bucket keeps its own (map key, context).
  /**
   * Until the write-behind has nothing left to write (device_actors unchanged for 2.5 s; it flushes every
   * second): a flush in flight holds the JSON of every dirty snapshot, which is not the actors' memory.
   */
  const writeBehindIdle = async () => {
    let last = ""
    let since = Date.now()
    const idle = await until(async () => {
      const [r] = await query<{ v: string }>("SELECT count(*)::text || '/' || coalesce(max(updated_at), 0)::text AS v FROM device_actors")
      if (r.v !== last) {
        last = r.v
        since = Date.now()
      }
      return Date.now() - since >= 2_500
    }, 60_000, 250)
    if (!idle) warnings.push("the snapshot write-behind did not go idle within 60 s before a heap measurement")
  }

  const event = (deviceId: string, at: number): DeviceActivity => ({
    organisationId,
    deviceId: Buffer.from(deviceId).toString(),
    at,
    event: { id: `evt_bench_${at}`, name: "power", data: { watts: 100 }, timestamp: at }
  })

  const heapBefore = heapUsed()
  if (active() !== 0) warnings.push(`${active()} actors were live before activation`)

  // 1. First activity of every device: one activation (a SQL read) each.
  phases.push(
    await phase(`activate ${total.toLocaleString("en-US")} devices`, total, "activations", "first activity, published at once; each activation reads the device (and any snapshot) with one query", async () => {
      for (const id of steady) activity.publish(event(id, Date.now()))
      for (const id of silent) activity.publish(event(id, Date.now()))
      await settled()
    })
  )
  if (active() !== total) warnings.push(`${active()} actors live after activation, expected ${total}`)
  if (delivered.size > 0) {
    warnings.push(`${delivered.size} silent devices went offline before the burst: raise BENCH_OFFLINE_AFTER above the activation time`)
  }

  // 2. The silent devices are seen in one burst, then fall silent at once.
  const deadlines = new Map<string, number>()
  const loop = monitorEventLoopDelay({ resolution: 10 })
  let burstApplyMs = 0
  let rows: Array<{ device_id: string; created_at: number; first_seen_at: number }> = []
  phases.push(
    await phase(`${silentCount.toLocaleString("en-US")} devices seen, then silent`, silentCount, "devices", `burst of activity on hosted devices, then silence until every offline alert is delivered (includes the ${settings.offlineAfterSeconds} s afterSeconds wait; alert rate below)`, async () => {
      delivered.clear()
      const profile = await profileFrom(process.env.BENCH_SILENT_PROFILE)
      const burst = performance.now()
      for (const id of silent) {
        const at = Date.now()
        deadlines.set(id, at + afterMs)
        activity.publish(event(id, at))
      }
      await settled()
      burstApplyMs = performance.now() - burst
      loop.enable()
      const all = await until(() => silent.every((id) => delivered.has(id)), afterMs + 5 * 60_000, 100)
      loop.disable()
      await profile()
      if (!all) warnings.push(`only ${delivered.size} of ${silentCount} offline alerts were delivered within ${settings.offlineAfterSeconds + 300} s`)
      rows = await query<{ device_id: string; created_at: number; first_seen_at: number }>(
        "SELECT device_id, created_at, first_seen_at FROM alerts WHERE alert_rule_id = $1",
        [silentRule]
      )
    })
  )
  const rowLateness: Array<number> = []
  let mismatched = 0
  for (const row of rows) {
    const deadline = deadlines.get(row.device_id)
    if (deadline === undefined) continue
    if (Number(row.first_seen_at) !== deadline) mismatched++
    rowLateness.push(Number(row.created_at) - deadline)
  }
  if (mismatched > 0) warnings.push(`${mismatched} offline alerts have a first_seen_at other than the deadline of the burst (opened before it?)`)
  const deliveredLateness = silent.flatMap((id) => {
    const at = delivered.get(id)
    return at === undefined ? [] : [at - deadlines.get(id)!]
  })
  const created = rows.map((r) => Number(r.created_at))
  const firstCreated = Math.min(...created)
  const lastCreated = Math.max(...created)
  const lateness: Lateness = {
    alerts: rows.length,
    expected: silentCount,
    row: spread(rowLateness),
    delivered: spread(deliveredLateness),
    alertsPerSecond: rows.length / (Math.max(1, lastCreated - firstCreated) / 1000),
    loopDelayP99Ms: loop.percentile(99) / 1e6,
    loopDelayMaxMs: loop.max / 1e6,
    burstApplyMs
  }
  if (rows.length !== silentCount) warnings.push(`${rows.length} offline alerts of the silent rule, expected ${silentCount}`)
  // The alert storm is over once its notifications have run too.
  await settled()

  // 3. Events to hosted actors: no SQL in the buckets' path for plain signs of life.
  const burstSize = 10_000
  phases.push(
    await phase(`${settings.events.toLocaleString("en-US")} events to hosted actors`, settings.events, "events", `bursts of ${burstSize.toLocaleString("en-US")}, each applied (settled) before the next, over the ${steadyCount.toLocaleString("en-US")} steady devices`, async () => {
      let k = 0
      for (let sent = 0; sent < settings.events; sent += burstSize) {
        const n = Math.min(burstSize, settings.events - sent)
        for (let i = 0; i < n; i++) activity.publish(event(steady[k++ % steady.length], Date.now()))
        await settled()
      }
    })
  )

  // 4. Memory of the hosted actors, once the write-behind has caught up.
  await writeBehindIdle()
  const hosted = active()
  const heapHosted = heapUsed()

  // 5. Passivation: activity back-dated past the idle limit, on devices no rule watches; each
  //    bucket's next sweep (every minute) stops their actors (nothing to store: their row says it all).
  //    A first tenth warms the path (code compiled on first use is not per device), the rest is measured.
  const backdated = Date.now() - PASSIVATE_AFTER_MS - 60_000
  const passivate = async (ids: ReadonlyArray<string>) => {
    for (const id of ids) activity.publish(event(id, backdated))
    await settled()
    const gone = await until(() => active() <= hosted, 120_000, 50)
    if (!gone) warnings.push(`${active() - hosted} idle actors were not passivated within 120 s`)
  }
  const warm = idle.slice(0, Math.max(1, Math.floor(passivatedCount / 10)))
  const measured = idle.slice(warm.length)
  await passivate(warm)
  await writeBehindIdle()
  const heapBeforePassivation = heapUsed()
  phases.push(
    await phase(`activate ${measured.length.toLocaleString("en-US")} idle devices, then passivate`, measured.length, "devices", "activity back-dated 6 min on unwatched devices; until the buckets' sweeps have stopped them all", () => passivate(measured))
  )
  await writeBehindIdle()
  const heapPassivated = heapUsed()
  // An unwatched device never changed liveness: it has no device_actors row to keep (its devices row re-derives it).
  const [stored] = await query<{ n: number }>("SELECT count(*)::int AS n FROM device_actors WHERE device_id = ANY($1::text[])", [idle])
  if (stored.n !== 0) warnings.push(`${stored.n} of ${passivatedCount} passivated (unwatched) devices have a device_actors row`)

  // 6. A passivated device returns: activation from its snapshot.
  phases.push(
    await phase(`re-activate ${passivatedCount.toLocaleString("en-US")} passivated devices`, passivatedCount, "activations", "fresh activity; each activation reads the device and its snapshot", async () => {
      for (const id of idle) activity.publish(event(id, Date.now()))
      await settled()
    })
  )
  if (active() !== hosted + passivatedCount) warnings.push(`${active()} live after re-activation, expected ${hosted + passivatedCount}`)

  // The store's side of a passivated device: its row and its primary-key entry.
  const [size] = await query<{ rows: number; heap: number; total: number; indexes: number; snapshot: number }>(
    `SELECT count(*)::int AS rows, pg_relation_size('device_actors')::float8 AS heap, pg_total_relation_size('device_actors')::float8 AS total,
            pg_indexes_size('device_actors')::float8 AS indexes, avg(pg_column_size(snapshot))::float8 AS snapshot FROM device_actors`
  )
  return {
    store,
    phases,
    hosted,
    heapPerHosted: (heapHosted - heapBefore) / hosted,
    heapPerPassivated: (heapPassivated - heapBeforePassivation) / measured.length,
    passivatedCount: measured.length,
    db: {
      rows: size.rows,
      rowBytes: (size.total - size.indexes) / size.rows,
      indexBytes: size.indexes / size.rows,
      snapshotBytes: size.snapshot
    },
    lateness,
    autovacuum,
    analyzeEvery,
    warnings
  }
}

// ---------------------------------------------------------------------------------------
// The child processes

/** Diagnosis: a CPU profile of this process from now until the returned function is called, written to `file`. */
const profileFrom = async (file: string | undefined): Promise<() => Promise<void>> => {
  if (file === undefined) return async () => {}
  const { Session } = await import("node:inspector/promises")
  const session = new Session()
  session.connect()
  await session.post("Profiler.enable")
  await session.post("Profiler.start")
  return async () => {
    const { profile } = await session.post("Profiler.stop")
    writeFileSync(file, JSON.stringify(profile))
    session.disconnect()
  }
}

const CHILD = "--bench-actors-part"
const RESULT = "BENCH_ACTORS_RESULT "

const child = async (part: Part): Promise<void> => {
  if (process.env.BENCH_LOOP_TRACE !== undefined) {
    // Diagnosis: the event loop's worst delay each second, on stderr.
    const trace = monitorEventLoopDelay({ resolution: 5 })
    trace.enable()
    setInterval(() => {
      process.stderr.write(`loop ${new Date().toISOString().slice(11, 23)} max ${(trace.max / 1e6).toFixed(0)} ms\n`)
      trace.reset()
    }, 1000).unref()
  }
  const result = part === "pure" ? await runPure() : await runBuckets(part)
  // Resolves once the line is written: exiting earlier could cut a long line short on a pipe.
  await new Promise<void>((done) => process.stdout.write(`${RESULT}${JSON.stringify(result)}\n`, () => done()))
}

const running = new Set<ChildProcess>()
process.on("exit", () => {
  for (const c of running) c.kill("SIGKILL")
})

/**
 * Runs one part in its own process with `npm start`'s Node flags (the server as it ships; its
 * young generation decides how much of a burst's garbage is promoted) and `--expose-gc`;
 * progress goes to stderr as it comes. With
 * `peer`, the part of the peer's own bench/actors.ts (a checkout of an earlier commit), in its
 * directory: the same settings, the same machine, the same run.
 */
const runPart = (part: Part, peer?: string): Promise<unknown> =>
  new Promise((resolvePart, reject) => {
    const script = peer === undefined ? self : resolve(peer, "bench/actors.ts")
    const c = spawn(process.execPath, [...serverNodeFlags, "--expose-gc", "--max-old-space-size=4096", ...(process.env.BENCH_CPU_PROF === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`]), ...(process.env.BENCH_NODE_FLAGS?.split(" ").filter((f) => f !== "") ?? []), "--import", "tsx", script, CHILD, part], {
      cwd: peer ?? root,
      env: process.env,
      stdio: ["ignore", "pipe", "inherit"]
    })
    running.add(c)
    let out = ""
    c.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk
      if (process.env.BENCH_CHILD_LOG !== undefined) appendFileSync(process.env.BENCH_CHILD_LOG, chunk)
    })
    const timer = setTimeout(() => {
      process.stderr.write(`bench:actors: part ${part} still running after ${PART_LIMIT_MS / 60_000} minutes; stopping it\n`)
      c.kill("SIGTERM")
      setTimeout(() => c.kill("SIGKILL"), 20_000).unref()
    }, PART_LIMIT_MS)
    c.once("close", (code) => {
      clearTimeout(timer)
      running.delete(c)
      const line = out.split("\n").find((l) => l.startsWith(RESULT))
      if (code === 0 && line !== undefined) resolvePart(JSON.parse(line.slice(RESULT.length)))
      else reject(new Error(`part ${part} exited with code ${code}${line === undefined ? `\n${out.slice(-2000)}` : ""}`))
    })
  })

// ---------------------------------------------------------------------------------------
// Reporting

const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "?")
const dec = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : "?")
const kb = (bytes: number) => `${dec(bytes / 1024, 2)} KB`

interface Table {
  readonly columns: ReadonlyArray<string>
  /** Columns from this index on are right-aligned (numbers)… */
  readonly numericFrom: number
  /** …up to this one, excluded (a trailing text column); all the rest when absent. */
  readonly numericTo?: number
  readonly rows: ReadonlyArray<ReadonlyArray<string>>
}

const numeric = (t: Table, i: number) => i >= t.numericFrom && i < (t.numericTo ?? t.columns.length)

const textTable = (t: Table): string => {
  const widths = t.columns.map((h, i) => Math.max(h.length, ...t.rows.map((r) => r[i].length)))
  const format = (r: ReadonlyArray<string>) => r.map((cell, i) => (numeric(t, i) ? cell.padStart(widths[i]) : cell.padEnd(widths[i]))).join("  ")
  return [format(t.columns), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(format)].join("\n")
}

const markdownTable = (t: Table): string =>
  [
    `| ${t.columns.join(" | ")} |`,
    `| ${t.columns.map((_, i) => (numeric(t, i) ? "---:" : "---")).join(" | ")} |`,
    ...t.rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

const pureTable = (r: PureResult): Table => ({
  columns: ["actors", "case", "heap/actor", "RSS/actor", "activation µs mean", "p50", "p99", "device.seen/s", "snapshot JSON", "passivate µs", "heap/passivated", "from snapshot µs mean", "p99"],
  numericFrom: 2,
  rows: r.cases.map((c) => [
    int(c.actors),
    c.label,
    kb(c.heapPerActor),
    kb(c.rssPerActor),
    dec(c.activationUs.mean),
    dec(c.activationUs.p50),
    dec(c.activationUs.p99),
    int(c.eventsPerSecond),
    `${int(c.snapshotBytes)} B`,
    dec(c.passivateUs),
    `${int(c.heapPerPassivated)} B`,
    dec(c.rehydrateUs.mean),
    dec(c.rehydrateUs.p99)
  ])
})

const phaseTable = (r: BucketsResult): Table => ({
  columns: ["store", "phase", "count", "seconds", "per second", "µs each", "Node CPU", "machine CPU", "how"],
  numericFrom: 2,
  numericTo: 8,
  rows: r.phases.map((p) => [
    r.store,
    p.name,
    int(p.count),
    dec(p.seconds),
    `${int(p.count / p.seconds)} ${p.unit}/s`,
    dec(p.seconds * 1e6 / p.count),
    dec(p.nodeCores, 2),
    `${dec(p.machineCores, 2)}/${cpus().length}`,
    p.note
  ])
})

const memoryTable = (results: ReadonlyArray<BucketsResult>): Table => ({
  columns: ["store", "hosted actors", "heap/hosted actor", "passivated", "heap/passivated", "device_actors rows", "row bytes", "PK index bytes/row", "snapshot jsonb"],
  numericFrom: 1,
  rows: results.map((r) => [
    r.store,
    int(r.hosted),
    kb(r.heapPerHosted),
    int(r.passivatedCount),
    `${int(r.heapPerPassivated)} B`,
    int(r.db.rows),
    `${int(r.db.rowBytes)} B`,
    `${int(r.db.indexBytes)} B`,
    `${int(r.db.snapshotBytes)} B`
  ])
})

const latenessTable = (results: ReadonlyArray<BucketsResult>): Table => ({
  columns: ["store", "silent devices", "alerts", "afterSeconds", "burst applied ms", "row p50 ms", "row p99 ms", "row max ms", "row min ms", "delivered p50 ms", "delivered p99 ms", "delivered max ms", "alerts/s", "loop delay p99 ms", "loop delay max ms"],
  numericFrom: 1,
  rows: results.map((r) => {
    const l = r.lateness
    return [
      r.store,
      int(l.expected),
      int(l.alerts),
      String(settings.offlineAfterSeconds),
      int(l.burstApplyMs),
      int(l.row.p50),
      int(l.row.p99),
      int(l.row.max),
      int(l.row.min),
      int(l.delivered.p50),
      int(l.delivered.p99),
      int(l.delivered.max),
      int(l.alertsPerSecond),
      int(l.loopDelayP99Ms),
      int(l.loopDelayMaxMs)
    ]
  })
})

const verdicts = (pure: PureResult | undefined, sup: ReadonlyArray<BucketsResult>): Array<string> => {
  const out: Array<string> = []
  const heaps = [
    ...(pure?.cases.map((c) => ({ where: `pure, ${c.label.split(":")[0]}`, bytes: c.heapPerActor })) ?? []),
    ...sup.map((r) => ({ where: `buckets on ${r.store}`, bytes: r.heapPerHosted }))
  ]
  if (heaps.length > 0) {
    const met = heaps.every((h) => h.bytes <= AIM.kbPerActor * 1024)
    out.push(`≤ ${AIM.kbPerActor} KB per active device actor: **${met ? "met" : "not met"}** — ${heaps.map((h) => `${kb(h.bytes)} (${h.where})`).join(", ")}.`)
  }
  const passivated = [
    ...(pure?.cases.map((c) => ({ where: `pure, ${c.label.split(":")[0]}`, bytes: c.heapPerPassivated })) ?? []),
    ...sup.map((r) => ({ where: `buckets on ${r.store}`, bytes: r.heapPerPassivated }))
  ]
  if (passivated.length > 0) {
    // Heap measurements move by a few hundred KB between collections: tens of bytes per device are noise.
    const met = passivated.every((p) => p.bytes < 64)
    const rows = sup.map((r) => `${r.store}: a \`device_actors\` row of ~${int(r.db.rowBytes)} B with a ~${int(r.db.indexBytes)} B primary-key entry`)
    out.push(
      `Nothing but an index entry for a passivated actor: **${met ? "met" : "not met"}** in memory — ${passivated.map((p) => `${int(p.bytes)} B (${p.where})`).join(", ")} of heap per passivated device; ` +
        `it stays in the store${rows.length > 0 ? ` (${rows.join("; ")})` : ""}.`
    )
  }
  for (const r of sup) {
    const l = r.lateness
    const met = l.alerts === l.expected && l.row.p99 <= AIM.latenessP99Ms && l.delivered.p99 <= AIM.latenessP99Ms
    out.push(
      `Offline-alert lateness p99 ≤ ${AIM.latenessP99Ms / 1000} s (${r.store}, ${int(l.expected)} devices silent at once): **${met ? "met" : "not met"}** — ` +
        `p50 ${int(l.row.p50)} ms / p99 ${int(l.row.p99)} ms to the row, p99 ${int(l.delivered.p99)} ms to delivery; ${int(l.alertsPerSecond)} alerts/s.`
    )
  }
  return out
}

const machine = () => {
  const cpuModel = /^model name\s*:\s*(.*)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? cpus()[0]?.model ?? "unknown"
  const nproc = (() => {
    try {
      return execFileSync("nproc", { encoding: "utf8" }).trim()
    } catch {
      return String(cpus().length)
    }
  })()
  return `${nproc} cores (nproc), ${cpuModel}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB memory, Node ${process.version}`
}

const utcDate = () => {
  try {
    return execFileSync("date", ["-u"], { encoding: "utf8" }).trim()
  } catch {
    return new Date().toUTCString()
  }
}

const load = () => loadavg().map((l) => l.toFixed(1)).join(" / ")

/** How each store's query plans were kept current (autovacuum or the bench's own ANALYZE). */
const analysisNotes = (sup: ReadonlyArray<BucketsResult>): Array<string> =>
  sup.map((r) =>
    r.analyzeEvery !== null
      ? `${r.store}: autovacuum is ${r.autovacuum} on this server; the bench ran \`ANALYZE devices, device_actors, alerts\` every ${r.analyzeEvery} s on its own connection, as autovacuum would (BENCH_ANALYZE_EVERY=0: never).`
      : `${r.store}: autovacuum ${r.autovacuum}; ANALYZE once after seeding, none after it.`
  )

const record = (date: string, tables: ReadonlyArray<[string, Table]>, lines: ReadonlyArray<string>, loadAt: { start: string; end: string }, analysis: ReadonlyArray<string>) => {
  const section = `
## Device actors (bench:actors): ${date}

\`npm run bench:actors\` (bench/actors.ts): ${int(settings.devices)} device actors, alone (no I/O) and hosted by the device buckets
(cluster entities, single runner on PGlite, HTTP runner on Postgres) of the in-process app (CoreLive) on a fresh store; activity fed through the in-process \`Activity\` service as Ingest publishes it.${peer === undefined ? "" : ` Rows marked "peer ${peer.commit}" are that commit's own bench/actors.ts and app, run in the same run with the same settings, one part after the other.`}

- Machine: ${machine()}. Postgres 15 runs on the same machine, sharing its cores. Load average (1/5/15 min) at the start
  ${loadAt.start}, at the end ${loadAt.end}: other work (another benchmark, test suites) was running on the machine, so
  expect noise between runs; "machine CPU" shows how busy both cores were during each phase.
- Heap: \`heapUsed\` after forced full collections (\`--expose-gc\`), before and after, over the number of actors; the
  pure part counts the device ids and the \`Map\` that holds the actors, the buckets part everything the process
  keeps per hosted device. Activation (pure): \`createActor\`, \`on("*")\`, \`start\`, first \`device.seen\`, timed per actor.
- Lateness: for each silent device, the deadline is the \`at\` of its last activity + afterSeconds (the alert's
  \`first_seen_at\`); "row" is \`alerts.created_at\` minus it, "delivered" the time its alert reached a subscriber of
  the in-process bus minus it. Event-loop delay is sampled from the end of the burst to the last delivery.
- Passivation by the buckets: activity back-dated past its 5-minute idle limit on devices no offline rule
  watches, so that each bucket's next sweep (every minute) stops them without a 5-minute wait; an unwatched device
  has nothing to store beyond its \`devices\` row (a first tenth warms the
  path up; heap measured before and after the rest, each time once the write-behind is idle).
${analysis.map((a) => `- Plans: ${a}`).join("\n")}

${tables.map(([title, t]) => `### ${title}\n\n${markdownTable(t)}`).join("\n\n")}

${lines.map((l) => `- ${l}`).join("\n")}
`
  appendFileSync(resultsFile, section)
}

// ---------------------------------------------------------------------------------------

/** This build against the peer on each store, as ratios (this ÷ peer). */
const peerRatios = (sup: ReadonlyArray<BucketsResult>): Array<string> =>
  peer === undefined ? [] : sup.flatMap((theirs) => {
    const ours = sup.find((r) => `${r.store}, peer ${peer.commit}` === theirs.store)
    if (ours === undefined) return []
    const rate = (r: BucketsResult, which: (name: string) => boolean) => {
      const p = r.phases.find((x) => which(x.name))
      return p === undefined ? Number.NaN : p.count / p.seconds
    }
    const activation = (name: string) => name.startsWith("activate ") && !name.includes("idle")
    const events = (name: string) => name.endsWith(" events to hosted actors")
    const x = (a: number, b: number) => `×${(a / b).toFixed(2)}`
    return [
      `Against peer ${peer.commit} on ${ours.store} (this ÷ peer): lateness to the row p50 ${x(ours.lateness.row.p50, theirs.lateness.row.p50)}, ` +
        `p99 ${x(ours.lateness.row.p99, theirs.lateness.row.p99)}; to delivery p99 ${x(ours.lateness.delivered.p99, theirs.lateness.delivered.p99)}; ` +
        `heap per hosted actor ${x(ours.heapPerHosted, theirs.heapPerHosted)}; activations/s ${x(rate(ours, activation), rate(theirs, activation))}; ` +
        `events/s to hosted actors ${x(rate(ours, events), rate(theirs, events))}.`
    ]
  })

/** BENCH_PEER: a checkout of the peer (`git worktree add --detach <dir> <commit>`, then `npm ci` in it). */
const peer = process.env.BENCH_PEER === undefined || process.env.BENCH_PEER === ""
  ? undefined
  : { dir: resolve(process.env.BENCH_PEER), commit: execFileSync("git", ["-C", resolve(process.env.BENCH_PEER), "rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim() }

const main = async (): Promise<number> => {
  const unknown = settings.parts.filter((p) => !isPart(p))
  if (unknown.length > 0) throw new Error(`BENCH_PARTS: unknown ${unknown.join(", ")}; use ${PARTS.join(", ")}`)
  const date = utcDate()
  const loadStart = load()
  console.log(`bench:actors — ${machine()}; load average ${loadStart}`)
  console.log(
    `${int(settings.devices)} actors; ${int(settings.silent)} fall silent (afterSeconds ${settings.offlineAfterSeconds}); ` +
      `${int(settings.passivated)} passivated; ${int(settings.events)} events through the buckets\n`
  )
  let pure: PureResult | undefined
  const sup: Array<BucketsResult> = []
  for (const part of settings.parts.filter(isPart)) {
    const result = await runPart(part)
    if (part === "pure") pure = result as PureResult
    else sup.push(result as BucketsResult)
    if (part !== "pure" && peer !== undefined) {
      // The peer's result has the same shape (its supervisor where the buckets are); its rows are labelled.
      const theirs = await runPart(part, peer.dir) as BucketsResult
      sup.push({ ...theirs, store: `${theirs.store}, peer ${peer.commit}` })
    }
  }
  const tables: Array<[string, Table]> = []
  if (pure !== undefined) tables.push(["Actors alone (no I/O)", pureTable(pure)])
  if (sup.length > 0) {
    tables.push(["Through the device buckets", { ...phaseTable(sup[0]), rows: sup.flatMap((r) => phaseTable(r).rows) }])
    tables.push(["Memory through the device buckets", memoryTable(sup)])
    tables.push([`Offline-alert lateness, ${int(settings.silent)} devices silent at once`, latenessTable(sup)])
  }
  const lines = [...verdicts(pure, sup), ...peerRatios(sup), ...sup.flatMap((r) => r.warnings.map((w) => `⚠ ${r.store}: ${w}`))]
  console.log("")
  for (const [title, t] of tables) console.log(`${title}\n\n${textTable(t)}\n`)
  for (const l of [...lines, ...analysisNotes(sup)]) console.log(l.replaceAll("**", "").replaceAll("`", ""))
  if (settings.record) {
    record(date, tables, lines, { start: loadStart, end: load() }, analysisNotes(sup))
    console.log(`\nappended to ${resultsFile}`)
  }
  return sup.some((r) => r.warnings.length > 0) ? 1 : 0
}

if (process.argv[2] === CHILD) {
  const part = process.argv[3] ?? ""
  if (!isPart(part)) throw new Error(`unknown part ${part}`)
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      // Drops the database before leaving; bounded in case the app does not close.
      setTimeout(() => process.exit(130), 20_000).unref()
      void (childCleanup?.() ?? Promise.resolve()).finally(() => process.exit(130))
    })
  }
  child(part).then(
    () => process.exit(0),
    (error: unknown) => {
      console.error(`bench:actors part ${part} failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
      process.exit(1)
    }
  )
} else {
  setTimeout(() => {
    console.error(`bench:actors: still running after ${WATCHDOG_MS / 60_000} minutes; stopping`)
    for (const c of running) c.kill("SIGTERM")
    setTimeout(() => process.exit(2), 25_000).unref()
  }, WATCHDOG_MS).unref()
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      console.error(`\nbench:actors: ${signal}; stopping the parts (their databases are dropped)`)
      for (const c of running) c.kill("SIGTERM")
      setTimeout(() => process.exit(130), 25_000).unref()
      void until(() => running.size === 0, 25_000, 100).then(() => process.exit(130))
    })
  }
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(`\nbench:actors failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
      process.exit(1)
    }
  )
}
