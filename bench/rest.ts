/**
 * `npm run bench:rest`: `GET /v1/devices/{id}` and the lists `GET /v1/devices?limit=20`,
 * `GET /v1/events?device.id=…&limit=100`, `GET /v1/alerts?limit=50` and `GET /v1/spaces` under
 * concurrent load against Voltaic on PGlite and on Postgres, with a bare Hono app serving
 * the same routes as the ceiling. Every server and the load generator run in their own
 * process; this one only starts them, seeds, collects and reports. Prints the table and
 * appends it to `bench/RESULTS.md`.
 *
 * Settings (environment): BENCH_CONNECTIONS (50), BENCH_DURATION seconds per case (10),
 * BENCH_WARMUP seconds before each case (3), BENCH_DEVICES (1000), BENCH_SPACES (10), BENCH_ROUTES
 * (all: devices,device,events,alerts,spaces; a comma-separated subset),
 * BENCH_TARGETS (bare,pglite,postgres), BENCH_PG_ADMIN_URL (the server and a database to
 * connect to for CREATE DATABASE; postgres://postgres@127.0.0.1:5432/test),
 * BENCH_CPU_PROF (a directory: run the Voltaic servers with `--cpu-prof` into it),
 * BENCH_ENTRY (src/main.ts: the entry file of the Voltaic targets, to compare a variant),
 * BENCH_NO_RECORD (set: do not append to RESULTS.md).
 */
import { randomBytes } from "node:crypto"
import { appendFileSync, existsSync, writeFileSync } from "node:fs"
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
  onShutdown,
  parallel,
  postgresCpuSeconds,
  processCpuSeconds,
  runMain,
  serverNodeFlags,
  start,
  stop,
  utcDate,
  voltaicEnv
} from "./harness.ts"
import { type LoadResult, type LoadSpec, MEASURING } from "./protocol.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const resultsFile = resolve(root, "bench/RESULTS.md")

const settings = {
  connections: intSetting("BENCH_CONNECTIONS", 50, 1),
  durationSeconds: intSetting("BENCH_DURATION", 10, 1),
  warmupSeconds: intSetting("BENCH_WARMUP", 3, 0),
  // At least one page of the list route.
  devices: intSetting("BENCH_DEVICES", 1000, 20),
  spaces: intSetting("BENCH_SPACES", 10, 1),
  targets: (process.env.BENCH_TARGETS ?? "bare,pglite,postgres").split(",").map((t) => t.trim()).filter((t) => t !== ""),
  pgAdminUrl: process.env.BENCH_PG_ADMIN_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  cpuProfDir: process.env.BENCH_CPU_PROF,
  entry: process.env.BENCH_ENTRY ?? "src/main.ts",
  record: process.env.BENCH_NO_RECORD === undefined
}

const HOST = "127.0.0.1"
const APP_KEY = `a_sk_bench${randomBytes(18).toString("base64url")}`
const AIM = { route: "GET /devices/{id}", target: "Postgres", requestsPerSecond: 10_000, p99Ms: 10 }
/** Issue 19's aims for the lists, against the bare route in the same run. */
const LIST_AIMS = [
  { target: "Postgres", ofBare: 0.5, p99Ms: 20 },
  { target: "PGlite", ofBare: 0.25, p99Ms: 50 }
] as const
/** Events of one device (the events list reads 100 of them) and devices with an open alert (the alerts list reads 50). */
const EVENTS = 100
const ALERTING = 60
/** Bounds the whole run so a stuck child can never keep it alive. */
const WATCHDOG_MS = 20 * 60_000

/** A Node child process in the repository root. */
const node = (name: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv): Child =>
  start(name, process.execPath, args, { cwd: root, env })

// ---------------------------------------------------------------------------------------
// Targets

interface Target {
  readonly name: string
  readonly child: Child
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  /** Paths for GET /devices/{id}, rotated through by the load generator. */
  readonly devicePaths: ReadonlyArray<string>
  /** The device whose events the events list reads. */
  readonly eventsDevice: string
  /** The Postgres database it uses, whose backends' CPU is counted; undefined for PGlite and bare. */
  readonly database?: string
  readonly close: () => Promise<void>
}

const startBare = async (): Promise<Target> => {
  const child = node("bare hono", ["--import", "tsx", "bench/bare.ts"], { ...process.env, HOST })
  const close = onShutdown(() => stop(child))
  const [, port] = await child.waitForLine(/bare hono listening on [\d.]+:(\d+)/, 60_000)
  const devicePaths = Array.from({ length: settings.devices }, (_, i) => `/v1/devices/dev_bench${String(i).padStart(6, "0")}`)
  return { name: "bare Hono", child, url: `http://${HOST}:${port}`, headers: {}, devicePaths, eventsDevice: "dev_bench000000", close }
}

const startVoltaic = async (
  name: string,
  databaseUrl: string,
  cleanup: () => Promise<void>,
  afterSeed: () => Promise<void> = async () => {},
  database?: string
): Promise<Target> => {
  const profile = settings.cpuProfDir === undefined
    ? []
    // One directory per target: tsx's loader thread writes a profile of its own beside the main thread's.
    : ["--cpu-prof", `--cpu-prof-dir=${resolve(settings.cpuProfDir, name.toLowerCase())}`]
  const env = voltaicEnv(HOST, APP_KEY, databaseUrl)
  const child = node(`voltaic (${name})`, [...serverNodeFlags, ...profile, "--import", "tsx", settings.entry], env)
  const close = onShutdown(async () => {
    await stop(child, 10_000)
    await cleanup()
  })
  const [, port] = await child.waitForLine(/http listening on [\d.]+:(\d+)/, 120_000)
  const url = `http://${HOST}:${port}`
  const headers = { authorization: `Bearer ${APP_KEY}` }
  const seeded = await seed(url, headers)
  await afterSeed()
  await verify(name, url, headers, seeded)
  return { name, child, url, headers, devicePaths: seeded.devices.map((id) => `/v1/devices/${id}`), eventsDevice: seeded.eventsDevice, database, close }
}

const startPglite = () => startVoltaic("PGlite", "memory://", async () => {})

const startPostgres = async (): Promise<Target> => {
  const db = await createBenchDatabase(settings.pgAdminUrl)
  // Registered before the server so that it runs after the server has stopped.
  const drop = onShutdown(db.drop)
  // A long-running server has had autovacuum analyze its tables; a database seeded a second ago
  // has not, and its plans for GET /devices/{id} then cost Postgres about twice the CPU.
  const analyze = async () => {
    await db.query("ANALYZE")
  }
  return startVoltaic("Postgres", db.url, drop, analyze, db.name)
}

const targetStarters: Record<string, () => Promise<Target>> = { bare: startBare, pglite: startPglite, postgres: startPostgres }

// ---------------------------------------------------------------------------------------
// Seeding over the REST API

const call = async (url: string, headers: Record<string, string>, method: string, path: string, body?: unknown): Promise<unknown> => {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  const text = await response.text()
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`)
  return JSON.parse(text)
}

const idOf = (value: unknown, what: string): string => {
  if (typeof value === "object" && value !== null && "id" in value && typeof value.id === "string") return value.id
  throw new Error(`${what}: no id in ${JSON.stringify(value)}`)
}

const listed = (value: unknown, key?: string): ReadonlyArray<unknown> => {
  const list = key === undefined ? value : typeof value === "object" && value !== null && key in value ? (value as Record<string, unknown>)[key] : undefined
  return Array.isArray(list) ? list : []
}

/**
 * Spaces; then ALERTING devices, each with one event over a threshold rule's max (an open alert
 * each), the first with EVENTS events in range; then the devices the device routes read, created
 * last so that they are the newest (the first page of `GET /devices`).
 */
const seed = async (url: string, headers: Record<string, string>): Promise<{ devices: Array<string>; eventsDevice: string }> => {
  const spaces = await parallel(settings.spaces, 8, async (i) =>
    idOf(await call(url, headers, "POST", "/v1/spaces", { name: `bench space ${i}` }), "POST /v1/spaces"))
  await call(url, headers, "POST", "/v1/alertRules", { name: "bench hot", type: "threshold", severity: "high", config: { eventName: "power", path: "watts", max: 150 } })
  const alerting = await parallel(ALERTING, 8, async (i) =>
    idOf(await call(url, headers, "POST", "/v1/devices", { name: `bench alerting ${i}`, space: { id: spaces[i % spaces.length] } }), "POST /v1/devices"))
  await parallel(ALERTING, 8, (i) => call(url, headers, "POST", "/v1/events", { device: { id: alerting[i] }, name: "power", data: { watts: 500 } }))
  await parallel(EVENTS, 8, (i) => call(url, headers, "POST", "/v1/events", { device: { id: alerting[0] }, name: "power", data: { watts: 100 + (i % 50) } }))
  const opened = Date.now()
  // Alerts open behind the events' commit (the device's bucket raises them).
  while (listed(await call(url, headers, "GET", `/v1/alerts?limit=200`)).length < ALERTING) {
    if (Date.now() - opened > 60_000) throw new Error(`fewer than ${ALERTING} alerts open 60 s after their events`)
    await new Promise((r) => setTimeout(r, 200))
  }
  const devices = await parallel(settings.devices, 16, async (i) =>
    idOf(
      await call(url, headers, "POST", "/v1/devices", { name: `bench device ${String(i).padStart(4, "0")}`, space: { id: spaces[i % spaces.length] } }),
      "POST /v1/devices"
    ))
  return { devices, eventsDevice: alerting[0] }
}

const verify = async (name: string, url: string, headers: Record<string, string>, seeded: { devices: ReadonlyArray<string>; eventsDevice: string }) => {
  const last = seeded.devices[seeded.devices.length - 1]
  const device = await call(url, headers, "GET", `/v1/devices/${last}`)
  if (idOf(device, "GET /v1/devices/{id}") !== last) throw new Error(`${name}: GET /v1/devices/{id} answered another device`)
  const expect = [
    ["/v1/devices?limit=20", listed(await call(url, headers, "GET", "/v1/devices?limit=20")).length, 20],
    [`/v1/events?device.id=…&limit=${EVENTS}`, listed(await call(url, headers, "GET", `/v1/events?device.id=${seeded.eventsDevice}&limit=${EVENTS}`), "events").length, EVENTS],
    ["/v1/alerts?limit=50", listed(await call(url, headers, "GET", "/v1/alerts?limit=50")).length, 50],
    ["/v1/spaces", listed(await call(url, headers, "GET", "/v1/spaces"), "spaces").length, settings.spaces]
  ] as const
  for (const [path, got, want] of expect) if (got !== want) throw new Error(`${name}: GET ${path} answered ${got} items, not ${want}`)
}

// ---------------------------------------------------------------------------------------
// Measuring

interface Case {
  readonly target: string
  readonly route: string
  readonly result: LoadResult
  /** CPU cores used during the measured run. */
  readonly serverCores: number
  /** Postgres processes; undefined where the database runs inside the server (PGlite) or there is none. */
  readonly databaseCores: number | undefined
  readonly machineCores: number
}

const allRoutes = [
  { key: "device", name: "GET /devices/{id}", list: false, paths: (t: Target) => t.devicePaths },
  { key: "devices", name: "GET /devices?limit=20", list: true, paths: (_: Target) => ["/v1/devices?limit=20"] },
  { key: "events", name: `GET /events?device.id&limit=${EVENTS}`, list: true, paths: (t: Target) => [`/v1/events?device.id=${t.eventsDevice}&limit=${EVENTS}`] },
  { key: "alerts", name: "GET /alerts?limit=50", list: true, paths: (_: Target) => ["/v1/alerts?limit=50"] },
  { key: "spaces", name: "GET /spaces", list: true, paths: (_: Target) => ["/v1/spaces"] }
] as const
const routeKeys = (process.env.BENCH_ROUTES ?? allRoutes.map((r) => r.key).join(",")).split(",").map((r) => r.trim())
const routes = allRoutes.filter((r) => routeKeys.includes(r.key))

const measure = async (target: Target, route: (typeof routes)[number]): Promise<Case> => {
  const spec: LoadSpec = {
    url: target.url,
    paths: route.paths(target),
    headers: target.headers,
    connections: settings.connections,
    durationSeconds: settings.durationSeconds,
    warmupSeconds: settings.warmupSeconds
  }
  process.stdout.write(`  ${target.name.padEnd(10)} ${route.name.padEnd(34)} `)
  const load = node("load", ["--import", "tsx", "bench/load.ts"], process.env)
  onShutdown(() => stop(load))
  try {
    load.process.stdin!.end(JSON.stringify(spec))
    const budget = (settings.warmupSeconds + settings.durationSeconds + 60) * 1000
    await load.waitForLine(new RegExp(`^${MEASURING}$`), budget)
    const serverBefore = processCpuSeconds(target.child.process.pid)
    const databaseBefore = target.database === undefined ? undefined : postgresCpuSeconds(target.database)
    const machineBefore = machineTicks()
    const [line] = await load.waitForLine(/^\{.*\}$/, budget)
    const serverAfter = processCpuSeconds(target.child.process.pid)
    const machineAfter = machineTicks()
    const databaseAfter = target.database === undefined ? undefined : postgresCpuSeconds(target.database)
    const result = JSON.parse(line) as LoadResult
    const c: Case = {
      target: target.name,
      route: route.name,
      result,
      serverCores: (serverAfter - serverBefore) / result.durationSeconds,
      databaseCores: databaseBefore === undefined || databaseAfter === undefined
        ? undefined
        : (databaseAfter - databaseBefore) / result.durationSeconds,
      machineCores: machineCores(machineBefore, machineAfter)
    }
    console.log(`${Math.round(result.requestsPerSecond)} req/s, p50 ${result.latencyMs.p50} ms, p99 ${result.latencyMs.p99} ms`)
    return c
  } finally {
    await stop(load)
  }
}

// ---------------------------------------------------------------------------------------
// Reporting

const columns = ["target", "route", "req/s", "p50 ms", "p99 ms", "non-2xx", "errors", "bytes/resp", "vs bare", "server CPU", "Postgres CPU", "loadgen CPU", "machine CPU"] as const

/** Wrong answers or broken connections: the run exits 1. */
const failed = (c: Case) => c.result.non2xx > 0 || c.result.errors > c.result.timeouts

/** Also requests that got no answer within autocannon's 10 s: reported, but a result of the load, not a failure. */
const flagged = (c: Case) => failed(c) || c.result.timeouts > 0

const rows = (cases: ReadonlyArray<Case>): Array<Array<string>> =>
  cases.map((c) => {
    const bare = cases.find((b) => b.target === "bare Hono" && b.route === c.route)
    const ratio = bare === undefined ? "–" : `${(c.result.requestsPerSecond / bare.result.requestsPerSecond).toFixed(2)}×`
    const cores = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : "?")
    return [
      c.target,
      c.route,
      Math.round(c.result.requestsPerSecond).toLocaleString("en-US"),
      String(c.result.latencyMs.p50),
      String(c.result.latencyMs.p99),
      c.result.non2xx > 0 ? `${c.result.non2xx} ⚠` : "0",
      c.result.errors + c.result.timeouts > 0 ? `${c.result.errors} (${c.result.timeouts} timeouts) ⚠` : "0",
      Math.round(c.result.bytesPerResponse).toLocaleString("en-US"),
      ratio,
      cores(c.serverCores),
      c.databaseCores === undefined ? "–" : cores(c.databaseCores),
      cores(c.result.loadCpuShare),
      `${cores(c.machineCores)}/${cpus().length}`
    ]
  })

const textTable = (cases: ReadonlyArray<Case>): string => {
  const body = rows(cases)
  const widths = columns.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)))
  const numeric = (i: number) => i >= 2
  const format = (r: ReadonlyArray<string>) => r.map((cell, i) => (numeric(i) ? cell.padStart(widths[i]) : cell.padEnd(widths[i]))).join("  ")
  return [format(columns), widths.map((w) => "-".repeat(w)).join("  "), ...body.map(format)].join("\n")
}

const markdownTable = (cases: ReadonlyArray<Case>): string =>
  [
    `| ${columns.join(" | ")} |`,
    `| ${columns.map((_, i) => (i >= 2 ? "---:" : "---")).join(" | ")} |`,
    ...rows(cases).map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

const aimVerdict = (cases: ReadonlyArray<Case>): string => {
  const c = cases.find((x) => x.target === AIM.target && x.route === AIM.route)
  const aim = `${AIM.target}, ${AIM.route}: ≥ ${AIM.requestsPerSecond.toLocaleString("en-US")} req/s with p99 ≤ ${AIM.p99Ms} ms`
  if (c === undefined) return `Aim (${aim}): not measured in this run.`
  const met = c.result.requestsPerSecond >= AIM.requestsPerSecond && c.result.latencyMs.p99 <= AIM.p99Ms && !flagged(c)
  return `Aim (${aim}): **${met ? "met" : "not met"}** — ${Math.round(c.result.requestsPerSecond).toLocaleString("en-US")} req/s, p99 ${c.result.latencyMs.p99} ms.`
}

/** Each list against the bare route of the same run (issue 19). */
const listVerdicts = (cases: ReadonlyArray<Case>): Array<string> =>
  allRoutes.filter((r) => r.list).flatMap((route) =>
    LIST_AIMS.flatMap((aim) => {
      const c = cases.find((x) => x.target === aim.target && x.route === route.name)
      const bare = cases.find((x) => x.target === "bare Hono" && x.route === route.name)
      if (c === undefined || bare === undefined) return []
      const ratio = c.result.requestsPerSecond / bare.result.requestsPerSecond
      const met = ratio >= aim.ofBare && c.result.latencyMs.p99 <= aim.p99Ms && !flagged(c)
      return [`Aim (${aim.target}, ${route.name}: ≥ ${aim.ofBare}× bare Hono, p99 ≤ ${aim.p99Ms} ms): **${met ? "met" : "not met"}** — ${ratio.toFixed(2)}× (${Math.round(c.result.requestsPerSecond).toLocaleString("en-US")} against ${Math.round(bare.result.requestsPerSecond).toLocaleString("en-US")} req/s), p99 ${c.result.latencyMs.p99} ms.`]
    }))

const postgresWhere = (): string => {
  const host = new URL(settings.pgAdminUrl).hostname
  const local = host === "127.0.0.1" || host === "localhost" || host === "[::1]" || host === ""
  return local ? "Postgres runs on the same machine, sharing its cores." : `Postgres at ${host}.`
}

const HEADER = `# REST benchmarks

\`npm run bench:rest\` (bench/rest.ts) loads \`GET /v1/devices/{id}\` and the devices, events, alerts and
spaces lists on Voltaic with PGlite (in memory) and with Postgres, and the same routes on a bare Hono app as
the ceiling. autocannon runs in its own process; every run appends a section below.

Columns: req/s is autocannon's mean per second; p50/p99 latency in whole milliseconds (autocannon's
resolution); bytes/resp includes headers; vs bare is req/s over the bare Hono app's on the same route;
CPU columns are cores used during the measured run: server = the Node server process, Postgres = all
\`postgres\` processes, loadgen = autocannon's process, machine = every process on the machine.
`

const record = (date: string, cases: ReadonlyArray<Case>, loadShare: { min: number; max: number }) => {
  if (!existsSync(resultsFile)) writeFileSync(resultsFile, HEADER)
  const section = `
## ${date}

- Machine: ${machine()}.${settings.targets.includes("postgres") ? ` ${postgresWhere()}` : ""}
- Load: autocannon 9, ${settings.connections} connections, ${settings.warmupSeconds} s warm-up then ${settings.durationSeconds} s per case;
  ${settings.spaces} spaces and ${settings.devices} devices seeded over REST; \`GET /devices/{id}\` rotates over all device ids;
  before them ${ALERTING} devices with an open alert each (a threshold rule), the first with ${EVENTS} events (the events list);
  authenticated with an application key (bearer). The Postgres database is ANALYZEd after seeding, as autovacuum
  would have done on a running server; PGlite has no autovacuum and is measured as the server leaves it.
- The load generator shares the ${cpus().length} cores with the server (and Postgres): it used ${loadShare.min.toFixed(2)}–${loadShare.max.toFixed(2)} of a core
  per case (the most against the fastest target), so these numbers are a lower bound of what the server alone could do.
  Other work may have been running on the machine (tests), so expect noise between runs.

${markdownTable(cases)}

${[aimVerdict(cases), ...listVerdicts(cases)].map((v) => `- ${v}`).join("\n")}
`
  appendFileSync(resultsFile, section)
}

// ---------------------------------------------------------------------------------------

const main = async () => {
  const unknownTargets = settings.targets.filter((t) => !(t in targetStarters))
  if (unknownTargets.length > 0) throw new Error(`BENCH_TARGETS: unknown ${unknownTargets.join(", ")}; use bare, pglite, postgres`)
  const date = utcDate()
  console.log(`bench:rest — ${machine()}`)
  console.log(`${settings.connections} connections, ${settings.warmupSeconds} s warm-up + ${settings.durationSeconds} s per case\n`)
  const cases: Array<Case> = []
  for (const name of settings.targets) {
    process.stdout.write(`${name}: starting${name === "bare" ? "" : ` and seeding ${settings.devices} devices`}… `)
    const started = Date.now()
    const target = await targetStarters[name]()
    console.log(`ready in ${((Date.now() - started) / 1000).toFixed(1)} s`)
    try {
      for (const route of routes) cases.push(await measure(target, route))
    } finally {
      await target.close()
    }
  }
  console.log(`\n${textTable(cases)}\n\n${[aimVerdict(cases), ...listVerdicts(cases)].join("\n").replaceAll("**", "")}`)
  const named = (list: ReadonlyArray<Case>) => list.map((c) => `${c.target} ${c.route}`).join("; ")
  const broken = cases.filter(failed)
  const slow = cases.filter((c) => !failed(c) && flagged(c))
  if (broken.length > 0) console.error(`\n⚠ non-2xx responses or connection errors in: ${named(broken)}`)
  if (slow.length > 0) console.error(`\n⚠ requests timed out (no answer within 10 s) in: ${named(slow)}`)
  if (settings.record) {
    const shares = cases.map((c) => c.result.loadCpuShare)
    record(date, cases, { min: Math.min(...shares), max: Math.max(...shares) })
    console.log(`\nappended to ${resultsFile}`)
  }
  return broken.length > 0 ? 1 : 0
}

runMain("bench:rest", WATCHDOG_MS, main)
