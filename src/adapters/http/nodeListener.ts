import { serve } from "@hono/node-server"
import { Effect, Layer } from "effect"
import { ServerResponse } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import type { AddressInfo, Socket } from "node:net"
import type { Duplex } from "node:stream"
import { printable } from "../logLine.ts"
import { errorBody } from "./errors.ts"
import { HttpListener, listenFailure } from "./HttpListener.ts"

/** A request line longer than this that Node's parser gave up on is a long URL (414), not long headers (431). */
const REQUEST_LINE_LIMIT = 8 * 1024

/** How long the answer to an earlier request on the connection may take before a refusal that follows it drops the connection. */
const ANSWER_WAIT_MS = 30_000

/** How long a refused connection is read on (so its peer sees the answer rather than a reset) before it is dropped. */
const LINGER_MS = 1_000

interface ParserError extends Error {
  readonly code?: string
  readonly rawPacket?: Buffer
}

/**
 * What Node's parser refuses before any handler sees the request (a request line or headers
 * beyond `maxHeaderSize`, malformed HTTP, a request too slow to arrive), as a JSON error like
 * every other: by default Node would answer without a body, or reset a peer still sending.
 */
const parserRefusal = (error: ParserError): { status: number; reason: string; code: string; message: string } | undefined => {
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW": {
      const lineEnd = error.rawPacket?.indexOf("\r\n") ?? -1
      return lineEnd === -1 || lineEnd > REQUEST_LINE_LIMIT
        ? { status: 414, reason: "URI Too Long", code: "uri_too_long", message: "the URL is too long" }
        : { status: 431, reason: "Request Header Fields Too Large", code: "headers_too_large", message: "the request headers are too large" }
    }
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, reason: "Request Timeout", code: "request_timeout", message: "the request did not arrive in time" }
    case "ECONNRESET":
    case "EPIPE":
      return undefined
    default:
      return { status: 400, reason: "Bad Request", code: "invalid_request", message: "malformed HTTP request" }
  }
}

/**
 * Ends a refused connection (with `last`, an answer written raw), then reads on and discards
 * until the peer closes it too, for at most `LINGER_MS`: a peer still sending (the body of a
 * refused request) gets to read the answer instead of meeting a reset.
 */
const linger = (socket: Duplex, last?: string) => {
  if (last === undefined) socket.end()
  else socket.end(last)
  socket.resume()
  const drop = setTimeout(() => socket.destroy(), LINGER_MS)
  drop.unref()
  socket.once("end", () => {
    clearTimeout(drop)
    socket.destroy()
  })
}

/**
 * Node closes a connection whose answer says `connection: close` with `destroySoon`: it ends
 * its side, then destroys the socket as soon as that end is written. A peer still sending the
 * body of a refused request (a 413, or a 401 before the body was read) then meets a reset: its
 * write fails (EPIPE) and it may never read the answer. Such connections `linger` instead, as
 * `onClientError`'s refusals do.
 */
const lingerOnClose = (socket: Socket) => {
  socket.destroySoon = () => linger(socket)
}

/** `HttpListener` on Node's http (or https) module through `@hono/node-server`. */
export const NodeHttpListener = Layer.succeed(HttpListener, {
  serve: (fetch, options) =>
    Effect.gen(function*() {
      const context = yield* Effect.context<never>()
      const answered = new WeakSet<Duplex>()
      const log = (line: string) => Effect.runForkWith(context)(Effect.logInfo(printable(line)))
      const onClientError = (error: ParserError, socket: Duplex) => {
        const refusal = parserRefusal(error)
        if (refusal === undefined || answered.has(socket) || !socket.writable) return void socket.destroy()
        answered.add(socket)
        const address = "remoteAddress" in socket ? String(socket.remoteAddress) : "unknown"
        log(`http request from ${address} refused ${refusal.status} ${refusal.code}: ${refusal.message}`)
        const body = JSON.stringify(errorBody(refusal.status, refusal.code, refusal.message))
        const answer = () =>
          linger(
            socket,
            `HTTP/1.1 ${refusal.status} ${refusal.reason}\r\ncontent-type: application/json\r\n` +
              `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
          )
        // Bytes after a request that declared no body (`DELETE` with one and no length) are read
        // as the next request: its refusal goes after the answer to the first, not into it.
        const inFlight = "_httpMessage" in socket ? socket._httpMessage : undefined
        if (inFlight instanceof ServerResponse && !inFlight.writableFinished) {
          inFlight.once("finish", answer)
          setTimeout(() => socket.destroy(), ANSWER_WAIT_MS).unref()
        } else answer()
      }
      return yield* Effect.acquireRelease(
        Effect.callback<{ server: ReturnType<typeof serve>; port: number }, ReturnType<typeof listenFailure>>((resume) => {
          const base = { fetch, port: options.port, hostname: options.host }
          const listening = (info: AddressInfo) => {
            server.off("error", onError)
            resume(Effect.succeed({ server, port: info.port }))
          }
          const server = options.tls === undefined
            ? serve(base, listening)
            : serve({ ...base, createServer: createHttpsServer, serverOptions: { cert: options.tls.cert, key: options.tls.key } }, listening)
          const onError = (err: unknown) => resume(Effect.fail(listenFailure(options, err)))
          server.once("error", onError)
          server.on("clientError", onClientError)
          // Every connection, plain or TLS (for TLS, the socket its requests are read from).
          server.on(options.tls === undefined ? "connection" : "secureConnection", lingerOnClose)
        }),
        ({ server }) =>
          Effect.callback<void>((resume) => {
            if ("closeAllConnections" in server) server.closeAllConnections()
            server.close(() => resume(Effect.void))
          })
      )
    }).pipe(Effect.map(({ port }) => ({ port })))
})
