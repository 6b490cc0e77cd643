import { type ChildProcess, spawn } from "node:child_process"
import { type AddressInfo, connect, createServer } from "node:net"

/** The nats-server binary for private servers a test may kill (never the shared one on 4222). */
export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? "/usr/sbin/nats-server"

export interface PrivateNats {
  readonly port: number
  readonly url: string
  /** SIGKILL; resolves once the process is gone. */
  kill(): Promise<void>
  /** Starts it again on the same port; resolves once it accepts connections. */
  restart(): Promise<void>
}

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/** A nats-server of its own on a free port (core NATS; `jetstream` adds -js with a temporary store). */
export const startPrivateNats = async (options: { readonly jetstreamDir?: string } = {}): Promise<PrivateNats> => {
  const port = await freePort()
  let child: ChildProcess | undefined
  const launch = async () => {
    const args = ["-a", "127.0.0.1", "-p", String(port), ...(options.jetstreamDir ? ["-js", "-sd", options.jetstreamDir] : [])]
    const started = spawn(NATS_SERVER_BIN, args, { stdio: "ignore" })
    child = started
    for (let i = 0; i < 200; i++) {
      if (started.exitCode !== null) throw new Error(`nats-server exited with ${started.exitCode} on port ${port}`)
      if (await accepts(port)) return
      await new Promise((r) => setTimeout(r, 25))
    }
    started.kill("SIGKILL")
    throw new Error(`nats-server did not accept connections on port ${port} within 5 s`)
  }
  const kill = async () => {
    const running = child
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return
    const gone = new Promise((r) => running.once("exit", r))
    running.kill("SIGKILL")
    await gone
  }
  await launch()
  process.once("exit", () => child?.kill("SIGKILL"))
  return { port, url: `nats://127.0.0.1:${port}`, kill, restart: launch }
}
