import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"

export const ROOT = fileURLToPath(new URL("../../", import.meta.url))

export interface ServerPorts {
  readonly port: number
  readonly mqttPort: number
  readonly mqttWsPort: number
  readonly coapPort: number
}

export interface ServerProcess extends ServerPorts {
  readonly child: ChildProcess
  output(): string
  stop(signal?: NodeJS.Signals): Promise<number | null>
}

export interface Exited {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const baseEnv = (env: Record<string, string>) => ({
  ...process.env,
  HOST: "127.0.0.1",
  PORT: "0",
  MQTT_PORT: "0",
  MQTT_WS_PORT: "0",
  COAP_PORT: "0",
  LOG_LEVEL: "info",
  ...env
})

/**
 * V8 flags of the servers and tools the suites start: wasm on Liftoff, V8's
 * baseline compiler, only. Such a process lives seconds, and V8's optimizing compiler spent most
 * of its threads' CPU compiling PGlite's hot functions for work that was over before they were
 * ready (to `listening` on memory://: 2.5 s of CPU on V8's threads, 0.7 s with this). `npm start`,
 * the benchmarks and every real server keep both tiers; the suites measure no speed.
 */
export const TEST_NODE_FLAGS: ReadonlyArray<string> = ["--liftoff-only"]

/** The built server and command-line tool (the package's bin), relative to ROOT. */
const SERVER_ENTRY = "dist/src/main.js"
const CLI_ENTRY = "dist/src/cli/main.js"

/**
 * `npm start` without npm: the built server (the suites' global setup, test/support/buildDist.ts,
 * compiles src/ into dist/ when it changed). Through tsx, whose loader resolves and loads every
 * module on a thread of its own, a start on memory:// took 5.2-8.8 s to its last listener
 * against 3.8 s built (2-core AMD EPYC VM), and the suites that spawn processes 187 s of CPU
 * against 130.
 */
const spawnServer = (env: Record<string, string>) =>
  spawn(process.execPath, [...TEST_NODE_FLAGS, SERVER_ENTRY], { cwd: ROOT, env: baseEnv(env), stdio: ["ignore", "pipe", "pipe"] })

/** `npm start` itself: it builds (when needed) and runs the built JavaScript. */
export const spawnNpmStart = (env: Record<string, string>) =>
  spawn("npm", ["start", "--silent"], { cwd: ROOT, env: baseEnv(env), stdio: ["ignore", "pipe", "pipe"] })

/** `voltaic start`, built: the command-line tool's way to the same server. */
export const spawnCliStart = (env: Record<string, string>) =>
  spawn(process.execPath, [...TEST_NODE_FLAGS, CLI_ENTRY, "start"], { cwd: ROOT, env: baseEnv(env), stdio: ["ignore", "pipe", "pipe"] })

const LISTENING = {
  port: /http listening on [^\s:]+:(\d+)/,
  mqttPort: /mqtt listening on [^\s:]+:(\d+)/,
  mqttWsPort: /mqtt-ws listening on [^\s:]+:(\d+)/,
  coapPort: /coap listening on [^\s:]+:(\d+)/
} as const

const portsIn = (out: string): ServerPorts | undefined => {
  const found: Partial<Record<keyof ServerPorts, number>> = {}
  for (const [key, pattern] of Object.entries(LISTENING) as Array<[keyof ServerPorts, RegExp]>) {
    const match = pattern.exec(out)
    if (!match) return undefined
    found[key] = Number(match[1])
  }
  return found as ServerPorts
}

/** Starts the server and resolves once it logs all its ports; rejects if it exits first. */
export const startServerProcess = (env: Record<string, string>, timeoutMs = 60_000, start = spawnServer): Promise<ServerProcess> =>
  new Promise((resolve, reject) => {
    const child = start(env)
    let out = ""
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`server did not start within ${timeoutMs} ms:\n${out}`))
    }, timeoutMs)
    const onData = (chunk: Buffer) => {
      out += chunk.toString()
      const ports = portsIn(out)
      if (ports) {
        child.stdout.off("data", onData)
        child.stderr.off("data", onData)
        child.stdout.on("data", (c: Buffer) => (out += c.toString()))
        child.stderr.on("data", (c: Buffer) => (out += c.toString()))
        clearTimeout(timer)
        resolve({
          child,
          ...ports,
          output: () => out,
          stop: (signal = "SIGTERM") =>
            new Promise((done) => {
              if (child.exitCode !== null || child.signalCode !== null) return done(child.exitCode)
              child.once("exit", (code) => done(code))
              child.kill(signal)
            })
        })
      }
    }
    child.stdout.on("data", onData)
    child.stderr.on("data", onData)
    child.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`server exited with ${code} before listening:\n${out}`))
    })
  })

/** Runs the server expecting it to stop by itself (a start-up failure). */
export const runServerToExit = (env: Record<string, string>, timeoutMs = 30_000): Promise<Exited> =>
  new Promise((resolve, reject) => {
    const child = spawnServer(env)
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()))
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()))
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`server did not exit within ${timeoutMs} ms:\n${stdout}${stderr}`))
    }, timeoutMs)
    child.once("exit", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })

/** `npm run voltaic -- …args` without npm or tsx: the built command-line tool (the package's bin). */
export const spawnCli = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  spawn(process.execPath, [...TEST_NODE_FLAGS, CLI_ENTRY, ...args], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })

/**
 * The command-line tool run to its end; `onStderr` sees its stderr as it comes, and `onSpawn` the
 * child as it starts (to signal it mid-way).
 */
export const runCli = (
  args: ReadonlyArray<string>,
  env: Record<string, string>,
  timeoutMs = 60_000,
  onStderr?: (stderr: string, child: ChildProcess) => void,
  onSpawn?: (child: ChildProcess) => void
): Promise<Exited> =>
  new Promise((resolve, reject) => {
    const child = spawnCli(args, env)
    onSpawn?.(child)
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()))
    child.stderr.on("data", (c: Buffer) => {
      stderr += c.toString()
      onStderr?.(stderr, child)
    })
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`voltaic ${args.join(" ")} did not end within ${timeoutMs} ms:\n${stdout}${stderr}`))
    }, timeoutMs)
    child.once("exit", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
