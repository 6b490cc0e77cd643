import { Context, Effect, Layer, type Scope } from "effect"
import { createSocket, type Socket } from "node:dgram"
import { isIPv6 } from "node:net"
import { AppConfig } from "../../config.ts"
import { type ListenFailed, listenFailure, type ListenOptions } from "../http/HttpListener.ts"
import { bindOwn } from "../listening.ts"

/** Milliseconds a closing socket waits at most for queued replies to leave. */
const MAX_FLUSH_WAITS = 100

/**
 * Receive buffer asked of the kernel (which caps it at `net.core.rmem_max`). The default
 * (~208 KiB) overflowed whenever the event loop stalled with 1,000 devices each sending, and
 * every dropped datagram cost its device a 2–3 s retransmission.
 */
const RECEIVE_BUFFER_BYTES = 4 * 1024 * 1024

/** A UDP socket bound to the configured address (no SO_REUSEADDR: a port in use fails), closed with the scope. */
const bind = (options: ListenOptions) =>
  Effect.acquireRelease(
    Effect.callback<Socket, ListenFailed>((resume) => {
      const socket = createSocket({ type: isIPv6(options.host) ? "udp6" : "udp4" })
      const onError = (error: Error) => {
        socket.close()
        resume(Effect.fail(listenFailure(options, error)))
      }
      socket.once("error", onError)
      socket.bind(options.port, options.host, () => {
        socket.off("error", onError)
        try {
          socket.setRecvBufferSize(RECEIVE_BUFFER_BYTES)
        } catch {
          // Not every runtime's node:dgram can set it; the default buffer still works.
        }
        resume(Effect.succeed(socket))
      })
    }),
    (socket) =>
      Effect.callback<void>((resume) => {
        // Replies just handed to the socket leave after an address lookup on a later tick;
        // closing before they are out would drop them.
        // Deno's node:dgram has no getSendQueueCount: there one tick must do.
        let waits = 0
        const queued = () => (typeof socket.getSendQueueCount === "function" ? socket.getSendQueueCount() : 0)
        const close = () => {
          if (queued() > 0 && waits++ < MAX_FLUSH_WAITS) return void setTimeout(close, 1)
          socket.close(() => resume(Effect.void))
        }
        setTimeout(close, 0)
      })
  )

/**
 * The CoAP socket, bound at start before anything else (datagrams that arrive before `open`
 * are dropped; a client retransmits, RFC 7252 §4.2). `open` hands it to the server and closes
 * it with the caller's scope.
 */
export class CoapListener extends Context.Service<CoapListener, {
  readonly port: number
  readonly open: Effect.Effect<Socket, never, Scope.Scope>
}>()("voltaic/adapters/coap/CoapListener") {
  static readonly layer = Layer.effect(
    CoapListener,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const { value: socket, closeWithScope } = yield* bindOwn(bind({ port: config.coapPort, host: config.host, setting: "COAP_PORT" }))
      return CoapListener.of({ port: socket.address().port, open: Effect.as(closeWithScope, socket) })
    })
  )
}
