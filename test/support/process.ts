import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"

export const ROOT = fileURLToPath(new URL("../../", import.meta.url))

export interface ServerProcess {
  readonly child: ChildProcess
  readonly port: number
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

/** `npm start` without npm: the same entry through tsx. */
const spawnServer = (env: Record<string, string>) =>
  spawn(process.execPath, ["--import", "tsx", "src/main.ts"], { cwd: ROOT, env: baseEnv(env), stdio: ["ignore", "pipe", "pipe"] })

/** Starts the server and resolves once it logs its HTTP port; rejects if it exits first. */
export const startServerProcess = (env: Record<string, string>, timeoutMs = 30_000): Promise<ServerProcess> =>
  new Promise((resolve, reject) => {
    const child = spawnServer(env)
    let out = ""
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`server did not start within ${timeoutMs} ms:\n${out}`))
    }, timeoutMs)
    const onData = (chunk: Buffer) => {
      out += chunk.toString()
      const match = /http listening on [^\s:]+:(\d+)/.exec(out)
      if (match) {
        clearTimeout(timer)
        resolve({
          child,
          port: Number(match[1]),
          output: () => out,
          stop: (signal = "SIGTERM") =>
            new Promise((done) => {
              if (child.exitCode !== null) return done(child.exitCode)
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
