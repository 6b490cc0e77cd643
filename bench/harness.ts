/**
 * Process plumbing shared by the benchmarks (`bench/rest.ts`, `bench/ingest.ts`): child
 * processes whose stdout lines can be awaited, cleanups that run once on exit, signals or
 * the watchdog, CPU and memory read from /proc, and a description of the machine.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { cpus, totalmem } from "node:os"
import { resolve } from "node:path"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { randomBytes } from "node:crypto"
import postgres from "postgres"

// ---------------------------------------------------------------------------------------
// Child processes

export interface Child {
  readonly name: string
  readonly process: ChildProcess
  /** The last lines of stdout and stderr, for failure messages. */
  readonly tail: Array<string>
  /** Resolves with the first stdout line, from now on, matching `pattern`; rejects if the child exits first. */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray>
  /** Writes one line to the child's stdin. */
  send(line: string): void
  readonly exited: Promise<number | null>
}

const running = new Set<ChildProcess>()

export const start = (
  name: string,
  command: string,
  args: ReadonlyArray<string>,
  options: {
    readonly cwd: string
    readonly env: NodeJS.ProcessEnv
    readonly onLine?: (line: string) => void
    /** Each line of stderr (also kept in `tail`). */
    readonly onErrorLine?: (line: string) => void
  }
): Child => {
  const child = spawn(command, [...args], { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"] })
  running.add(child)
  const tail: Array<string> = []
  const listeners = new Set<(line: string) => void>()
  const keep = (line: string) => {
    tail.push(line)
    if (tail.length > 120) tail.shift()
  }
  createInterface({ input: child.stdout! }).on("line", (line) => {
    keep(line)
    options.onLine?.(line)
    for (const listener of listeners) listener(line)
  })
  createInterface({ input: child.stderr! }).on("line", (line) => {
    keep(line)
    options.onErrorLine?.(line)
  })
  // A child that exits early closes its stdin; a write then must not crash the benchmark.
  child.stdin!.on("error", () => {})
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
      let done = false
      const finish = (outcome: RegExpExecArray | Error) => {
        if (done) return
        done = true
        clearTimeout(timer)
        listeners.delete(onLine)
        if (outcome instanceof Error) reject(outcome)
        else resolveLine(outcome)
      }
      listeners.add(onLine)
      void exited.then((code) => finish(new Error(`${name} exited (code ${code}) before printing ${pattern}\n${tail.join("\n")}`)))
    })
  const send = (line: string) => {
    if (child.stdin!.writable) child.stdin!.write(`${line}\n`)
  }
  return { name, process: child, tail, waitForLine, send, exited }
}

/** SIGTERM, then SIGKILL if the child has not exited after `graceMs`. */
export const stop = async (child: Child, graceMs = 5_000): Promise<void> => {
  if (child.process.exitCode !== null || child.process.signalCode !== null) return
  child.process.kill("SIGTERM")
  const timer = setTimeout(() => child.process.kill("SIGKILL"), graceMs)
  await child.exited
  clearTimeout(timer)
}

process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL")
})

/** What must be undone before leaving (servers, load processes, the Postgres database), newest first. */
const cleanups: Array<() => Promise<void>> = []

/** Registers `f` to run once, at the latest on shutdown; returns it for an earlier call. */
export const onShutdown = (f: () => Promise<void>): (() => Promise<void>) => {
  let done: Promise<void> | undefined
  const once = () => (done ??= f())
  cleanups.unshift(once)
  return once
}

const shutdown = async (label: string): Promise<void> => {
  for (const f of cleanups) {
    try {
      await f()
    } catch (error) {
      console.error(`${label}: cleanup failed: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
}

/**
 * Runs `main`, then undoes what was started and exits with its code; SIGINT/SIGTERM and a
 * watchdog after `watchdogMs` do the same.
 */
export const runMain = (label: string, watchdogMs: number, main: () => Promise<number>): void => {
  let leaving = false
  const leave = async (code: number): Promise<never> => {
    if (!leaving) {
      leaving = true
      // Bounds the cleanup too; the "exit" handler then SIGKILLs whatever is left.
      setTimeout(() => process.exit(code), 30_000).unref()
      await shutdown(label)
    }
    process.exit(code)
  }
  setTimeout(() => {
    console.error(`${label}: still running after ${watchdogMs / 60_000} minutes; stopping`)
    void leave(2)
  }, watchdogMs).unref()
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      console.error(`\n${label}: ${signal}; stopping the child processes`)
      void leave(130)
    })
  }
  main().then(
    (code) => leave(code),
    (error: unknown) => {
      // After a signal the children are being stopped on purpose; their errors are expected.
      if (!leaving) console.error(`\n${label} failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
      return leave(1)
    }
  )
}

/** A whole-number setting from the environment, `fallback` when unset; anything else stops the run. */
export const intSetting = (name: string, fallback: number, min: number): number => {
  const raw = process.env[name]
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < min) throw new Error(`${name}: expected a whole number from ${min}, got ${raw}`)
  return n
}

export const sleep = (ms: number) => new Promise<void>((resolveSleep) => setTimeout(resolveSleep, Math.max(0, ms)))

/** Sleeps until the wall-clock time `at` (epoch ms). */
export const sleepUntil = (at: number) => sleep(at - Date.now())

// ---------------------------------------------------------------------------------------
// CPU and memory from /proc

const clockTicks = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

const statFields = (stat: string) => stat.slice(stat.lastIndexOf(")") + 2).split(" ")

/** User + system CPU seconds of a process (its threads included). */
export const processCpuSeconds = (pid: number | undefined): number => {
  if (pid === undefined) return Number.NaN
  try {
    const fields = statFields(readFileSync(`/proc/${pid}/stat`, "utf8"))
    return (Number(fields[11]) + Number(fields[12])) / clockTicks
  } catch {
    return Number.NaN
  }
}

/** Pids of every process whose command name (`/proc/<pid>/stat`) is `name`. */
export const pidsNamed = (name: string): Array<number> => {
  const pids: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) === name) pids.push(Number(entry))
    } catch {
      // The process ended between readdir and read.
    }
  }
  return pids
}

/**
 * User + system CPU seconds of the Postgres server: its shared processes (postmaster,
 * checkpointer, WAL writer…) and, when `database` is given, only the backends connected to
 * that database (other sessions' backends are other work); without it, every backend.
 */
export const postgresCpuSeconds = (database?: string): number =>
  pidsNamed("postgres").reduce((sum, pid) => {
    if (database !== undefined) {
      let title = ""
      try {
        title = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ")
      } catch {
        return sum
      }
      // A client backend's title: "postgres: 15/main: <user> <database> <host>(<port>) <state>".
      const backend = /: \S+ (\S+) [^ ]*\(\d+\)/.exec(title)
      if (backend !== null && backend[1] !== database) return sum
    }
    return sum + (processCpuSeconds(pid) || 0)
  }, 0)

/** Busy and total jiffies of all cores together. */
export const machineTicks = (): { busy: number; total: number } => {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]
  const values = line.trim().split(/\s+/).slice(1, 9).map(Number)
  const total = values.reduce((a, b) => a + b, 0)
  const idle = values[3] + values[4]
  return { busy: total - idle, total }
}

/** Cores busy between two `machineTicks` readings. */
export const machineCores = (before: { busy: number; total: number }, after: { busy: number; total: number }) =>
  (after.busy - before.busy) / (after.total - before.total) * cpus().length

/**
 * Waits until the machine has been nearly idle (under `maxCores` busy) for a second, at most
 * `limitMs`; returns the cores busy in the last second sampled (other work, e.g. tests).
 */
export const awaitQuiet = async (maxCores: number, limitMs: number): Promise<number> => {
  const until = Date.now() + limitMs
  for (;;) {
    const before = machineTicks()
    await sleep(1_000)
    const busy = machineCores(before, machineTicks())
    if (busy < maxCores || Date.now() >= until) return busy
  }
}

/** What the stall probe saw in a window. */
export interface Stalls {
  /** Wake-ups `STALL_COUNTED_MS` or more late. */
  readonly count: number
  /** The latest wake-up's lateness, ms (0: none reported). */
  readonly longestMs: number
  /** The share of the window's time the probe was late by 2 ms or more, in %. */
  readonly stalledPercent: number
}

/** A stall the tables count: a wake-up at least this late, ms. */
export const STALL_COUNTED_MS = 5

/** Table columns for `stallCells`. */
export const STALL_COLUMNS = [`stalls ≥ ${STALL_COUNTED_MS} ms`, "longest stall ms", "stalled %"]

export const stallCells = (s: Stalls | undefined): Array<string> =>
  s === undefined ? ["–", "–", "–"] : [String(s.count), s.longestMs.toFixed(1), s.stalledPercent.toFixed(2)]

export interface StallProbe {
  /** The stalls due between `from` and `to` (epoch ms). */
  within(from: number, to: number): Stalls
  close(): Promise<void>
}

/**
 * Starts `bench/stall-probe.ts`, a process that wakes every millisecond and reports each late
 * wake-up: the machine's own stalls, measured beside a case as its peer is.
 */
export const startStallProbe = async (root: string): Promise<StallProbe> => {
  const seen: Array<readonly [number, number]> = []
  const child = start("stall probe", process.execPath, ["--import", "tsx", "bench/stall-probe.ts"], {
    cwd: root,
    env: process.env,
    onLine: (line) => {
      const [at, late] = line.split(" ").map(Number)
      if (Number.isFinite(at) && Number.isFinite(late)) seen.push([at, late])
    }
  })
  await child.waitForLine(/^READY$/, 30_000)
  return {
    within: (from, to) => {
      const inWindow = seen.filter(([at]) => at >= from && at < to)
      const lost = inWindow.reduce((sum, [, late]) => sum + late, 0)
      return {
        count: inWindow.filter(([, late]) => late >= STALL_COUNTED_MS).length,
        longestMs: inWindow.reduce((longest, [, late]) => Math.max(longest, late), 0),
        stalledPercent: to > from ? (100 * lost) / (to - from) : Number.NaN
      }
    },
    close: () => stop(child)
  }
}

/** Resident memory of a process in KiB (VmRSS), NaN when unreadable. */
export const rssKiB = (pid: number | undefined): number => {
  if (pid === undefined) return Number.NaN
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match ? Number(match[1]) : Number.NaN
  } catch {
    return Number.NaN
  }
}

/** Counters of the `Udp:` line of /proc/net/snmp (InDatagrams, RcvbufErrors, …), for dropped datagrams. */
export const udpCounters = (): Record<string, number> => {
  try {
    const lines = readFileSync("/proc/net/snmp", "utf8").split("\n").filter((l) => l.startsWith("Udp:"))
    const names = lines[0].split(/\s+/).slice(1)
    const values = lines[1].split(/\s+/).slice(1).map(Number)
    return Object.fromEntries(names.map((n, i) => [n, values[i]]))
  } catch {
    return {}
  }
}

// ---------------------------------------------------------------------------------------
// The machine

/** `HEAD` and how many files under `dirs` differ from it (read-only git commands). */
export const gitState = (cwd: string, dirs: ReadonlyArray<string>): string => {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd, encoding: "utf8" }).trim()
    const changed = execFileSync("git", ["status", "--porcelain", "--", ...dirs], { cwd, encoding: "utf8" }).split("\n").filter((l) => l.trim() !== "").length
    return changed === 0 ? `commit ${head}` : `commit ${head} plus ${changed} uncommitted change${changed === 1 ? "" : "s"} under ${dirs.join(", ")}`
  } catch {
    return "not a git checkout"
  }
}

export const machine = (): string => {
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

export const utcDate = (): string => {
  try {
    return execFileSync("date", ["-u"], { encoding: "utf8" }).trim()
  } catch {
    return new Date().toUTCString()
  }
}

/** Runs `f` over `0…count-1` with at most `width` in flight. */
export const parallel = async <A>(count: number, width: number, f: (i: number) => Promise<A>): Promise<Array<A>> => {
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

// ---------------------------------------------------------------------------------------
// The server under test

/**
 * The environment of a Voltaic server under test: every listener on a free port at `host`,
 * the given store, and nothing of the caller's shell that would change it (NATS, a data directory).
 */
/**
 * The Node flags `npm start` gives the server (package.json `config.nodeFlags`): a benchmark
 * measures the server as it ships, and gives the Node peers it starts the same runtime.
 */
export const serverNodeFlags: ReadonlyArray<string> = (() => {
  const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { config?: { nodeFlags?: string } }
  return (manifest.config?.nodeFlags ?? "").split(" ").filter((flag) => flag !== "")
})()

/** `store`: a database URL (`postgres://…`, `memory://`), or PGlite's data directory as `npm start` keeps it (`DATA_DIR`, no `DATABASE_URL`). */
export const voltaicEnv = (host: string, appKey: string, store: string | { readonly dataDir: string }): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: "0",
    HOST: host,
    MQTT_PORT: "0",
    MQTT_WS_PORT: "0",
    COAP_PORT: "0",
    LOG_LEVEL: process.env.BENCH_SERVER_LOG_LEVEL ?? "info",
    BOOTSTRAP_APP_KEY: appKey
  }
  delete env.NATS_URL
  delete env.DATA_DIR
  delete env.DATABASE_URL
  if (typeof store === "string") env.DATABASE_URL = store
  else env.DATA_DIR = store.dataDir
  return env
}

export interface BenchDatabase {
  readonly name: string
  readonly url: string
  /** Runs a statement on the database (ANALYZE, counts) over one connection kept for the run. */
  query<T extends Record<string, unknown>>(statement: string, params?: ReadonlyArray<unknown>): Promise<Array<T>>
  /** Closes that connection and drops the database; register it to run after the server stopped. */
  drop(): Promise<void>
}

/** A fresh database on the Postgres server of `adminUrl` (which names a database to connect to for CREATE DATABASE). */
export const createBenchDatabase = async (adminUrl: string, prefix = "voltaic_bench"): Promise<BenchDatabase> => {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 })
  const name = `${prefix}_${randomBytes(6).toString("hex")}`
  try {
    await admin.unsafe(`CREATE DATABASE ${name}`)
  } catch (error) {
    await admin.end({ timeout: 0 })
    throw new Error(`cannot create a database with BENCH_PG_ADMIN_URL: ${error instanceof Error ? error.message : String(error)}`)
  }
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  let db: postgres.Sql | undefined
  return {
    name,
    url: url.toString(),
    query: async <T extends Record<string, unknown>>(statement: string, params: ReadonlyArray<unknown> = []) => {
      db ??= postgres(url.toString(), { max: 1, onnotice: () => {}, connect_timeout: 5 })
      return [...await db.unsafe<Array<T>>(statement, [...params] as Array<postgres.ParameterOrJSON<never>>)]
    },
    drop: async () => {
      try {
        await db?.end({ timeout: 5 })
        await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      } finally {
        await admin.end({ timeout: 5 })
      }
    }
  }
}

/** The checkout the benches run from, and the file each appends its results to. */
export const benchRoot = fileURLToPath(new URL("..", import.meta.url))
export const resultsFile = resolve(benchRoot, "bench/RESULTS.md")

/** A table for the terminal: columns from `textColumns` on are numbers, right-aligned. */
export const textTable = (columns: ReadonlyArray<string>, body: ReadonlyArray<ReadonlyArray<string>>, textColumns: number) => {
  const widths = columns.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)))
  const format = (r: ReadonlyArray<string>) => r.map((cell, i) => (i >= textColumns ? cell.padStart(widths[i]) : cell.padEnd(widths[i]))).join("  ")
  return [format(columns), widths.map((w) => "-".repeat(w)).join("  "), ...body.map(format)].join("\n")
}

/** The same table for RESULTS.md. */
export const markdownTable = (columns: ReadonlyArray<string>, body: ReadonlyArray<ReadonlyArray<string>>, textColumns: number) =>
  [
    `| ${columns.join(" | ")} |`,
    `| ${columns.map((_, i) => (i >= textColumns ? "---:" : "---")).join(" | ")} |`,
    ...body.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

/** The p-th percentile (0–100) of sorted values, nearest rank; NaN for none. */
export const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
