/**
 * The server under fuzzing: `src/main.ts` as a child process with every listener on a free
 * port, restarted on the same store if it dies (each death counted, with the end of its log),
 * its log read for defects, and `/health` polled.
 */
import { createWriteStream, type WriteStream } from "node:fs"
import { get } from "node:http"
import { fileURLToPath } from "node:url"
import { type Child, processCpuSeconds, serverNodeFlags, start, stop } from "../bench/harness.ts"

export const ROOT = fileURLToPath(new URL("../", import.meta.url))
export const HOST = "127.0.0.1"

export interface Ports {
  readonly http: number
  readonly mqtt: number
  readonly coap: number
}

export interface Death {
  readonly at: string
  readonly code: number | null
  readonly signal: string | null
  readonly tail: ReadonlyArray<string>
}

const LISTENING = {
  http: /http listening on [^\s:]+:(\d+)/,
  mqtt: /mqtt listening on [^\s:]+:(\d+)/,
  coap: /coap listening on [^\s:]+:(\d+)/
} as const

/** A line of the server's logger: `[08:12:52.342] WARN (#72): message`. */
const LOG_LINE = /^\[\d\d:\d\d:\d\d\.\d+\] ([A-Z]+) /

/** The line without what changes from one occurrence to the next (time, fiber, ids, numbers), to count kinds. */
const kindOf = (line: string) =>
  line.replace(/^\[[^\]]*\] /, "").replace(/\(#\d+\)/, "").replace(/\b(dev|evt|loc|spc|cmd)_[0-9a-z]+/g, "$1_…").replace(/\d+/g, "N").slice(0, 300)

/** A kind of defect in the log: its first occurrence (with up to 12 continuation lines, a stack) and how many. */
export interface Defect {
  readonly first: Array<string>
  count: number
}

export class ServerUnderTest {
  ports: Ports = { http: 0, mqtt: 0, coap: 0 }
  readonly deaths: Array<Death> = []
  /** Error and fatal log lines, and anything printed outside the logger (a stack), by kind. */
  readonly defects = new Map<string, Defect>()
  healthChecks = 0
  healthFailures: Array<string> = []
  private child: Child | undefined
  private stopping = false
  private up: Promise<void> = Promise.resolve()
  private poller: NodeJS.Timeout | undefined

  /** `logPath`: where to keep the server's whole log (FUZZ_LOG), for looking into a finding. */
  constructor(private readonly env: NodeJS.ProcessEnv, private readonly maxDeaths: number, logPath?: string) {
    this.logFile = logPath === undefined ? undefined : createWriteStream(logPath, { flags: "a" })
  }

  private readonly logFile: WriteStream | undefined

  /** Resolves while the server is up; waits while it is being restarted. */
  readonly gate = (): Promise<void> => this.up

  /** A reader of one output stream: continuation lines (a stack) belong to the line before them on the same stream. */
  private lineReader = (stream: string) => {
    let block: Defect | undefined
    return (line: string) => {
      this.logFile?.write(`${stream}${line}\n`)
      const log = LOG_LINE.exec(line)
      if (log === null && (/^[\s}]/.test(line) || line === "")) {
        if (block !== undefined && block.first.length < 13) block.first.push(line.slice(0, 300))
        return
      }
      block = undefined
      if (log !== null ? log[1] !== "ERROR" && log[1] !== "FATAL" : line.startsWith("Voltaic created its first organisation")) return
      const kind = kindOf(line)
      const seen = this.defects.get(kind)
      if (seen !== undefined) seen.count += 1
      else {
        block = { first: [line.slice(0, 1_000)], count: 1 }
        this.defects.set(kind, block)
      }
    }
  }

  async start(): Promise<void> {
    // FUZZ_CPU_PROF=dir: a V8 CPU profile of the server, written there when it stops.
    const profile = process.env.FUZZ_CPU_PROF === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${process.env.FUZZ_CPU_PROF}`]
    const child = start("voltaic", process.execPath, [...serverNodeFlags, ...profile, "--import", "tsx", "src/main.ts"], {
      cwd: ROOT,
      env: this.env,
      onLine: this.lineReader(""),
      onErrorLine: this.lineReader("stderr: ")
    })
    const port = async (pattern: RegExp) => Number((await child.waitForLine(pattern, 120_000))[1])
    this.child = child
    const [http, mqtt, coap] = await Promise.all([port(LISTENING.http), port(LISTENING.mqtt), port(LISTENING.coap)])
    this.ports = { http, mqtt, coap }
    void child.exited.then((code) => this.onExit(child, code))
    this.poller ??= setInterval(() => this.pollHealth(), 1_000)
  }

  /** CPU seconds of the server processes so far (those that ended included). */
  cpuSeconds(): number {
    return this.endedCpu + (this.child === undefined ? 0 : processCpuSeconds(this.child.process.pid) || 0)
  }

  private endedCpu = 0

  private onExit(child: Child, code: number | null) {
    if (this.stopping || child !== this.child) return
    this.endedCpu += this.lastCpu
    this.lastCpu = 0
    this.deaths.push({ at: new Date().toISOString(), code, signal: child.process.signalCode, tail: child.tail.slice(-40) })
    console.error(`\nfuzz: the server died (code ${code}, signal ${child.process.signalCode}); ${this.deaths.length} death(s)`)
    if (this.deaths.length > this.maxDeaths) {
      this.up = Promise.reject(new Error(`the server died ${this.deaths.length} times; stopping`))
      this.up.catch(() => {})
      return
    }
    this.up = this.start()
  }

  private lastCpu = 0

  private pollHealth() {
    if (this.stopping) return
    // Sampled each second: a dead process's /proc entry is gone.
    this.lastCpu = processCpuSeconds(this.child?.process.pid) || this.lastCpu
    this.healthChecks += 1
    const req = get({ host: HOST, port: this.ports.http, path: "/health", timeout: 5_000 }, (res) => {
      res.resume()
      if (res.statusCode !== 200) this.healthFailures.push(`${new Date().toISOString()} ${res.statusCode}`)
    })
    req.on("timeout", () => req.destroy(new Error("no answer in 5 s")))
    req.on("error", (error) => this.healthFailures.push(`${new Date().toISOString()} ${error.message}`))
  }

  async stop(): Promise<void> {
    this.stopping = true
    clearInterval(this.poller)
    if (this.child !== undefined) await stop(this.child, 15_000)
    this.logFile?.end()
  }
}
