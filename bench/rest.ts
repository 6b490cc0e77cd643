/**
 * `npm run bench:rest`: `GET /v1/devices/{id}` and `GET /v1/devices?limit=20` under
 * concurrent load against Voltaic on PGlite and on Postgres, with a bare Hono app serving
 * the same routes as the ceiling. Every server and the load generator run in their own
 * process; this one only starts them, seeds, collects and reports. Prints the table and
 * appends it to `bench/RESULTS.md`.
 *
 * Settings (environment): BENCH_CONNECTIONS (50), BENCH_DURATION seconds per case (10),
 * BENCH_WARMUP seconds before each case (3), BENCH_DEVICES (1000), BENCH_SPACES (10),
 * BENCH_TARGETS (bare,pglite,postgres), BENCH_PG_ADMIN_URL (the server and a database to
 * connect to for CREATE DATABASE; postgres://postgres@127.0.0.1:5432/test),
 * BENCH_CPU_PROF (a directory: run the Voltaic servers with `--cpu-prof` into it),
 * BENCH_ENTRY (src/main.ts: the entry file of the Voltaic targets, to compare a variant),
 * BENCH_NO_RECORD (set: do not append to RESULTS.md).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { appendFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { cpus, totalmem } from "node:os"
import { resolve } from "node:path"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import postgres from "postgres"
import { type LoadResult, type LoadSpec, MEASURING } from "./protocol.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const resultsFile = resolve(root, "bench/RESULTS.md")

const intSetting = (name: string, fallback: number, min: number): number => {
  const raw = process.env[name]
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < min) throw new Error(`${name}: expected a whole number from ${min}, got ${raw}`)
  return n
}

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
/** Bounds the whole run so a stuck child can never keep it alive. */
const WATCHDOG_MS = 20 * 60_000

// ---------------------------------------------------------------------------------------
// Child processes

interface Child {
  readonly name: string
  readonly process: ChildProcess
  /** The last lines of stdout and stderr, for failure messages. */
  readonly tail: Array<string>
  /** Resolves with the first stdout line matching `pattern`; rejects if the child exits first. */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray>
  readonly exited: Promise<number | null>
}

const running = new Set<ChildProcess>()

const start = (name: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv): Child => {
  const child = spawn(process.execPath, [...args], { cwd: root, env, stdio: ["pipe", "pipe", "pipe"] })
  running.add(child)
  const tail: Array<string> = []
  const listeners = new Set<(line: string) => void>()
  const keep = (line: string) => {
    tail.push(line)
    if (tail.length > 40) tail.shift()
  }
  createInterface({ input: child.stdout! }).on("line", (line) => {
    keep(line)
    for (const listener of listeners) listener(line)
  })
  createInterface({ input: child.stderr! }).on("line", keep)
  const exited = new Promise<number | null>((resolveExit) => {
    // "close", not "exit": it comes after the last line of stdout has been read.
    child.once("close", (code) => {
      running.delete(child)
      resolveExit(code)
    })
    child.once("error", (error) => {
      keep(`spawn failed: ${error.message}`)
      running.delete(child)
      resolveExit(null)
    })
  })
  const waitForLine = (pattern: RegExp, timeoutMs: number) =>
    new Promise<RegExpExecArray>((resolveLine, reject) => {
      const timer = setTimeout(() => finish(new Error(`${name}: no line matching ${pattern} within ${timeoutMs} ms\n${tail.join("\n")}`)), timeoutMs)
      const onLine = (line: string) => {
        const match = pattern.exec(line)
        if (match) finish(match)
      }
      const finish = (outcome: RegExpExecArray | Error) => {
        clearTimeout(timer)
        listeners.delete(onLine)
        if (outcome instanceof Error) reject(outcome)
        else resolveLine(outcome)
      }
      listeners.add(onLine)
      void exited.then((code) => finish(new Error(`${name} exited (code ${code}) before printing ${pattern}\n${tail.join("\n")}`)))
    })
  return { name, process: child, tail, waitForLine, exited }
}

/** SIGTERM, then SIGKILL if the child has not exited after `graceMs`. */
const stop = async (child: Child, graceMs = 5_000): Promise<void> => {
  if (child.process.exitCode !== null || child.process.signalCode !== null) return
  child.process.kill("SIGTERM")
  const timer = setTimeout(() => child.process.kill("SIGKILL"), graceMs)
  await child.exited
  clearTimeout(timer)
}

process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL")
})

/** What must be undone before leaving (servers, the Postgres database), newest first. */
const cleanups: Array<() => Promise<void>> = []

/** Registers `f` to run once, at the latest on shutdown; returns it for an earlier call. */
const onShutdown = (f: () => Promise<void>): (() => Promise<void>) => {
  let done: Promise<void> | undefined
  const once = () => (done ??= f())
  cleanups.unshift(once)
  return once
}

const shutdown = async (): Promise<void> => {
  for (const f of cleanups) {
    try {
      await f()
    } catch (error) {
      console.error(`bench:rest: cleanup failed: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
}

// ---------------------------------------------------------------------------------------
// CPU accounting from /proc, to show how the 2 cores are shared during a case

const clockTicks = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/** User + system CPU seconds of a process. */
const processCpuSeconds = (pid: number | undefined): number => {
  if (pid === undefined) return Number.NaN
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(fields[11]) + Number(fields[12])) / clockTicks
  } catch {
    return Number.NaN
  }
}

/** User + system CPU seconds of every process named `postgres` (the server and its backends). */
const postgresCpuSeconds = (): number => {
  let total = 0
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) !== "postgres") continue
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      total += (Number(fields[11]) + Number(fields[12])) / clockTicks
    } catch {
      // The process ended between readdir and read.
    }
  }
  return total
}

/** Busy and total jiffies of all cores together. */
const machineTicks = (): { busy: number; total: number } => {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]
  const values = line.trim().split(/\s+/).slice(1, 9).map(Number)
  const total = values.reduce((a, b) => a + b, 0)
  const idle = values[3] + values[4]
  return { busy: total - idle, total }
}

// ---------------------------------------------------------------------------------------
// Targets

interface Target {
  readonly name: string
  readonly child: Child
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  /** Paths for GET /devices/{id}, rotated through by the load generator. */
  readonly devicePaths: ReadonlyArray<string>
  readonly close: () => Promise<void>
}

const startBare = async (): Promise<Target> => {
  const child = start("bare hono", ["--import", "tsx", "bench/bare.ts"], { ...process.env, HOST })
  const close = onShutdown(() => stop(child))
  const [, port] = await child.waitForLine(/bare hono listening on [\d.]+:(\d+)/, 60_000)
  const devicePaths = Array.from({ length: settings.devices }, (_, i) => `/v1/devices/dev_bench${String(i).padStart(6, "0")}`)
  return { name: "bare Hono", child, url: `http://${HOST}:${port}`, headers: {}, devicePaths, close }
}

const startVoltaic = async (
  name: string,
  databaseUrl: string,
  cleanup: () => Promise<void>,
  afterSeed: () => Promise<void> = async () => {}
): Promise<Target> => {
  const profile = settings.cpuProfDir === undefined
    ? []
    // One directory per target: tsx's loader thread writes a profile of its own beside the main thread's.
    : ["--cpu-prof", `--cpu-prof-dir=${resolve(settings.cpuProfDir, name.toLowerCase())}`]
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: "0",
    HOST,
    MQTT_PORT: "0",
    MQTT_WS_PORT: "0",
    COAP_PORT: "0",
    LOG_LEVEL: "info",
    BOOTSTRAP_APP_KEY: APP_KEY,
    DATABASE_URL: databaseUrl
  }
  delete env.NATS_URL
  delete env.DATA_DIR
  const child = start(`voltaic (${name})`, [...profile, "--import", "tsx", settings.entry], env)
  const close = onShutdown(async () => {
    await stop(child, 10_000)
    await cleanup()
  })
  const [, port] = await child.waitForLine(/http listening on [\d.]+:(\d+)/, 120_000)
  const url = `http://${HOST}:${port}`
  const headers = { authorization: `Bearer ${APP_KEY}` }
  const ids = await seed(url, headers)
  await afterSeed()
  await verify(name, url, headers, ids)
  return { name, child, url, headers, devicePaths: ids.map((id) => `/v1/devices/${id}`), close }
}

const startPglite = () => startVoltaic("PGlite", "memory://", async () => {})

const startPostgres = async (): Promise<Target> => {
  const admin = postgres(settings.pgAdminUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 })
  const database = `voltaic_bench_${randomBytes(6).toString("hex")}`
  try {
    await admin.unsafe(`CREATE DATABASE ${database}`)
  } catch (error) {
    await admin.end({ timeout: 0 })
    throw new Error(`cannot create a database with BENCH_PG_ADMIN_URL: ${error instanceof Error ? error.message : String(error)}`)
  }
  // Registered before the server so that it runs after the server has stopped.
  const drop = onShutdown(async () => {
    try {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    } finally {
      await admin.end({ timeout: 5 })
    }
  })
  const url = new URL(settings.pgAdminUrl)
  url.pathname = `/${database}`
  // A long-running server has had autovacuum analyze its tables; a database seeded a second ago
  // has not, and its plans for GET /devices/{id} then cost Postgres about twice the CPU.
  const analyze = async () => {
    const db = postgres(url.toString(), { max: 1, onnotice: () => {}, connect_timeout: 5 })
    try {
      await db.unsafe("ANALYZE")
    } finally {
      await db.end({ timeout: 5 })
    }
  }
  return startVoltaic("Postgres", url.toString(), drop, analyze)
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

/** Runs `f` over `0…count-1` with at most `width` in flight. */
const parallel = async <A>(count: number, width: number, f: (i: number) => Promise<A>): Promise<Array<A>> => {
  const out = new Array<A>(count)
  let next = 0
  const worker = async () => {
    while (next < count) {
      const i = next++
      out[i] = await f(i)
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, count) }, worker))
  return out
}

const seed = async (url: string, headers: Record<string, string>): Promise<Array<string>> => {
  const spaces = await parallel(settings.spaces, 8, async (i) =>
    idOf(await call(url, headers, "POST", "/v1/spaces", { name: `bench space ${i}` }), "POST /v1/spaces"))
  return parallel(settings.devices, 16, async (i) =>
    idOf(
      await call(url, headers, "POST", "/v1/devices", { name: `bench device ${String(i).padStart(4, "0")}`, space: { id: spaces[i % spaces.length] } }),
      "POST /v1/devices"
    ))
}

const verify = async (name: string, url: string, headers: Record<string, string>, ids: ReadonlyArray<string>) => {
  const device = await call(url, headers, "GET", `/v1/devices/${ids[ids.length - 1]}`)
  if (idOf(device, "GET /v1/devices/{id}") !== ids[ids.length - 1]) throw new Error(`${name}: GET /v1/devices/{id} answered another device`)
  const list = await call(url, headers, "GET", "/v1/devices?limit=20")
  if (!Array.isArray(list) || list.length !== 20) throw new Error(`${name}: GET /v1/devices?limit=20 did not answer an array of 20`)
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

const routes = [
  { name: "GET /devices/{id}", paths: (t: Target) => t.devicePaths },
  { name: "GET /devices?limit=20", paths: (_: Target) => ["/v1/devices?limit=20"] }
] as const

const measure = async (target: Target, route: (typeof routes)[number]): Promise<Case> => {
  const spec: LoadSpec = {
    url: target.url,
    paths: route.paths(target),
    headers: target.headers,
    connections: settings.connections,
    durationSeconds: settings.durationSeconds,
    warmupSeconds: settings.warmupSeconds
  }
  process.stdout.write(`  ${target.name.padEnd(10)} ${route.name.padEnd(22)} `)
  const load = start("load", ["--import", "tsx", "bench/load.ts"], process.env)
  onShutdown(() => stop(load))
  try {
    load.process.stdin!.end(JSON.stringify(spec))
    const budget = (settings.warmupSeconds + settings.durationSeconds + 60) * 1000
    await load.waitForLine(new RegExp(`^${MEASURING}$`), budget)
    const serverBefore = processCpuSeconds(target.child.process.pid)
    const databaseBefore = target.name === "Postgres" ? postgresCpuSeconds() : undefined
    const machineBefore = machineTicks()
    const [line] = await load.waitForLine(/^\{.*\}$/, budget)
    const serverAfter = processCpuSeconds(target.child.process.pid)
    const machineAfter = machineTicks()
    const databaseAfter = databaseBefore === undefined ? undefined : postgresCpuSeconds()
    const result = JSON.parse(line) as LoadResult
    const cores = cpus().length
    const machineCores = (machineAfter.busy - machineBefore.busy) / (machineAfter.total - machineBefore.total) * cores
    const c: Case = {
      target: target.name,
      route: route.name,
      result,
      serverCores: (serverAfter - serverBefore) / result.durationSeconds,
      databaseCores: databaseBefore === undefined || databaseAfter === undefined
        ? undefined
        : (databaseAfter - databaseBefore) / result.durationSeconds,
      machineCores
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

const postgresWhere = (): string => {
  const host = new URL(settings.pgAdminUrl).hostname
  const local = host === "127.0.0.1" || host === "localhost" || host === "[::1]" || host === ""
  return local ? "Postgres runs on the same machine, sharing its cores." : `Postgres at ${host}.`
}

const utcDate = () => {
  try {
    return execFileSync("date", ["-u"], { encoding: "utf8" }).trim()
  } catch {
    return new Date().toUTCString()
  }
}

const HEADER = `# REST benchmarks

\`npm run bench:rest\` (bench/rest.ts) loads \`GET /v1/devices/{id}\` and \`GET /v1/devices?limit=20\`
on Voltaic with PGlite (in memory) and with Postgres, and the same routes on a bare Hono app as
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
  authenticated with an application key (bearer). The Postgres database is ANALYZEd after seeding, as autovacuum
  would have done on a running server; PGlite has no autovacuum and is measured as the server leaves it.
- The load generator shares the ${cpus().length} cores with the server (and Postgres): it used ${loadShare.min.toFixed(2)}–${loadShare.max.toFixed(2)} of a core
  per case (the most against the fastest target), so these numbers are a lower bound of what the server alone could do.
  Other work may have been running on the machine (tests), so expect noise between runs.

${markdownTable(cases)}

${aimVerdict(cases)}
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
  console.log(`\n${textTable(cases)}\n\n${aimVerdict(cases).replaceAll("**", "")}`)
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

/** Undoes what was started, then exits; a second call (another signal) does not wait again. */
let leaving = false
const leave = async (code: number): Promise<never> => {
  if (!leaving) {
    leaving = true
    // Bounds the cleanup too; the "exit" handler then SIGKILLs whatever is left.
    setTimeout(() => process.exit(code), 30_000).unref()
    await shutdown()
  }
  process.exit(code)
}

setTimeout(() => {
  console.error(`bench:rest: still running after ${WATCHDOG_MS / 60_000} minutes; stopping`)
  void leave(2)
}, WATCHDOG_MS).unref()

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    console.error(`\nbench:rest: ${signal}; stopping the child processes`)
    void leave(130)
  })
}

main().then(
  (code) => leave(code),
  (error: unknown) => {
    // After a signal the children are being stopped on purpose; their errors are expected.
    if (!leaving) console.error(`\nbench:rest failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    return leave(1)
  }
)
