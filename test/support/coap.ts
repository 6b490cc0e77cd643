import { Agent, request } from "coap"
import type { CoapMethod } from "coap-packet"
import { ConfigProvider, Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import { createSocket, type Socket } from "node:dgram"
import { CoapListener } from "../../src/adapters/coap/CoapListener.ts"
import { CoapLive, CoapServer } from "../../src/adapters/coap/CoapServer.ts"
import { startApp, type TestApp } from "./app.ts"

/** How long a test waits for one CoAP answer on loopback before failing. */
export const ANSWER_TIMEOUT_MS = 5_000

export interface CoapTestApp extends TestApp {
  /** The UDP port the CoAP server bound (COAP_PORT=0). */
  readonly coapPort: number
}

/**
 * The CoAP layer over a fresh in-memory core, on 127.0.0.1 and a free port; REST through `call`.
 * With `logs`, the messages the CoAP layer logs at info and above (its refusals among them) are appended to it (not printed).
 */
export const startCoapApp = async (env: Record<string, string> = {}, logs?: Array<string>): Promise<CoapTestApp> => {
  const t = await startApp({ DATABASE_URL: "memory://", ...(logs === undefined ? {} : { LOG_LEVEL: "info" }), ...env })
  const scope = await Effect.runPromise(Scope.make())
  const provider = ConfigProvider.fromEnvRecord({ COAP_PORT: "0", HOST: "127.0.0.1", ...env })
  const core = Layer.succeedContext(t.context)
  const services = logs === undefined ? core : Layer.merge(core, Logger.layer([Logger.make(({ message }) => logs.push(String(message)))]))
  const exit = await Effect.runPromiseExit(
    Layer.buildWithScope(CoapLive.pipe(Layer.provide(CoapListener.layer), Layer.provide(services), Layer.provide(ConfigProvider.layer(provider))), scope)
  )
  if (Exit.isFailure(exit)) {
    await t.close()
    throw new Error(`CoAP layer failed to start: ${String(exit.cause)}`)
  }
  return {
    ...t,
    coapPort: Context.get(exit.value, CoapServer).port,
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await t.close()
    }
  }
}

export interface CoapAnswer {
  readonly code: string
  readonly text: string
  readonly headers: Record<string, unknown>
  // Test code reads arbitrary JSON shapes.
  readonly body: any
}

export interface CoapCall {
  readonly method?: CoapMethod
  readonly path: string
  readonly payload?: string | Buffer
  readonly confirmable?: boolean
  readonly options?: Partial<Record<string, string | number | Buffer>>
  /** Send the payload block-wise (RFC 7959 Block1, 1024-byte blocks). */
  readonly blockwise?: boolean
}

/** One request with the `coap` client over a real socket; rejects after `ANSWER_TIMEOUT_MS`. */
export const coapCall = (agent: Agent, port: number, call: CoapCall): Promise<CoapAnswer> =>
  new Promise((resolve, reject) => {
    const req = request({
      hostname: "127.0.0.1",
      port,
      method: call.method ?? "POST",
      pathname: call.path,
      confirmable: call.confirmable ?? true,
      agent
    })
    for (const [name, value] of Object.entries(call.options ?? {})) if (value !== undefined) req.setOption(name, value)
    if (call.blockwise === true) req.setOption("Block1", Buffer.of(6))
    const timer = setTimeout(() => reject(new Error(`no CoAP answer to ${call.method ?? "POST"} ${call.path} in ${ANSWER_TIMEOUT_MS} ms`)), ANSWER_TIMEOUT_MS)
    req.on("response", (res) => {
      clearTimeout(timer)
      const text = res.payload.toString()
      let body: unknown = text
      try {
        body = text === "" ? undefined : JSON.parse(text)
      } catch {
        // not JSON: keep the text
      }
      resolve({ code: res.code, text, headers: res.headers, body })
    })
    req.on("error", (error: Error) => {
      clearTimeout(timer)
      reject(error)
    })
    req.end(call.payload)
  })

/** A bare UDP socket for byte-exact datagrams; `next` waits for answers in arrival order. */
export interface RawPeer {
  readonly port: number
  send(datagram: Buffer): Promise<void>
  /** The next `count` datagrams received (not yet taken), or a rejection after `ANSWER_TIMEOUT_MS`. */
  next(count?: number): Promise<Array<Buffer>>
  /** Waits `ms`, then takes every datagram received meanwhile (not yet taken): to show that nothing more came. */
  settle(ms: number): Promise<Array<Buffer>>
  close(): Promise<void>
}

export const rawPeer = async (serverPort: number): Promise<RawPeer> => {
  const socket: Socket = createSocket("udp4")
  await new Promise<void>((resolve, reject) => {
    socket.once("error", reject)
    socket.bind(0, "127.0.0.1", () => {
      socket.off("error", reject)
      resolve()
    })
  })
  const inbox: Array<Buffer> = []
  let waiter: (() => void) | undefined
  socket.on("message", (datagram) => {
    inbox.push(datagram)
    waiter?.()
  })
  return {
    port: socket.address().port,
    send: (datagram) =>
      new Promise((resolve, reject) => socket.send(datagram, serverPort, "127.0.0.1", (error) => (error ? reject(error) : resolve()))),
    next: (count = 1) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiter = undefined
          reject(new Error(`expected ${count} datagram(s), got ${inbox.length} in ${ANSWER_TIMEOUT_MS} ms`))
        }, ANSWER_TIMEOUT_MS)
        const check = () => {
          if (inbox.length < count) return
          clearTimeout(timer)
          waiter = undefined
          resolve(inbox.splice(0, count))
        }
        waiter = check
        check()
      }),
    settle: (ms) => new Promise((resolve) => setTimeout(() => resolve(inbox.splice(0, inbox.length)), ms)),
    close: () => new Promise((resolve) => socket.close(() => resolve()))
  }
}

/** A client agent with its own socket, closed by the caller. */
export const coapAgent = (): Agent => new Agent({ type: "udp4" })
