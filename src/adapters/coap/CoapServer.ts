import { createServer, type IncomingMessage, type OutgoingMessage } from "coap"
import { generate, type ParsedPacket } from "coap-packet"
import { Context, Effect, FiberSet, Layer } from "effect"
import type { RemoteInfo, Socket } from "node:dgram"
import type { Auth } from "../../auth/Auth.ts"
import { AppConfig } from "../../config.ts"
import { Unavailable } from "../../domain/errors.ts"
import type { Ingest } from "../../ingest/Ingest.ts"
import { CoapListener } from "./CoapListener.ts"
import { blockValue, makeTransfers, parseBlock, readUint } from "./blockwise.ts"
import { printable } from "../logLine.ts"
import { badBlock2, coapError, type CoapReply, errorReply, refusalLine } from "./errors.ts"
import { answeredMessageId, exchangeKey, makeExchanges } from "./exchanges.ts"
import { type CoapRequest, handleCoap, MAX_COAP_PAYLOAD_BYTES } from "./handler.ts"
import { makeLogLimit, withHeld } from "./logLimit.ts"
import { describeRequest, endpointName, replyDatagram, screen } from "./screen.ts"
import { countCoapDropped, countCoapReceived, countCoapSent } from "../../metrics.ts"

/**
 * How long a reply may take to go piggybacked on the ACK of a Confirmable request; after
 * this the coap package sends an empty ACK and the reply separately (RFC 7252 §5.2.2).
 * Below ACK_TIMEOUT (2 s, §4.8) so a client does not retransmit while the event is stored.
 */
const PIGGYBACK_REPLY_MS = 1_000

/** On close, requests being stored get this long to be answered; the rest are answered 5.03. */
const DRAIN_MS = 2_000

/** The bound CoAP endpoint: `port` is the one the OS chose when `COAP_PORT` is 0. */
export class CoapServer extends Context.Service<CoapServer, { readonly port: number }>()("voltaic/adapters/coap/CoapServer") {}

/** What the handler reads of a request the coap package parsed. */
export const fromIncoming = (req: IncomingMessage): CoapRequest => {
  const format = req.headers["Content-Format"]
  return {
    method: req.method ?? req.code,
    path: req.url.split("?")[0],
    contentFormat: typeof format === "string" || typeof format === "number" ? format : undefined,
    payload: req.payload
  }
}

const send = (res: OutgoingMessage, reply: CoapReply) => {
  res.code = reply.code
  res.setOption("Content-Format", "application/json")
  if (reply.block1 !== undefined) res.setOption("Block1", Buffer.from(reply.block1))
  if (reply.maxAge !== undefined) res.setOption("Max-Age", reply.maxAge)
  if (reply.size1 !== undefined) res.setOption("Size1", reply.size1)
  res.end(Buffer.from(reply.payload))
}

const shuttingDown = coapError(new Unavailable({ retryAfterSeconds: 5, message: "the server is shutting down; retry shortly" }))

const malformed = (name: string) => errorReply("4.00", "bad_request", `${name}: malformed option (RFC 7959 §2.2)`)

/**
 * Options handled before the coap package sees a request: Block1 (with Size1) and Block2
 * here, and Observe, which nothing here offers (RFC 7641 §4.1: the reply simply carries
 * no Observe) and which would switch the package to a stream that sends no response code.
 */
const TAKEN_HERE = new Set(["Block1", "Block2", "Size1", "Observe"])

/** Any size will do for a datagram rebuilt here (coap-packet's default limit is 1280 bytes). */
const ANY_LENGTH = Number.MAX_SAFE_INTEGER

/** RFC 9175 §3.2: coap-packet names options it does not know by their number. */
const REQUEST_TAG = "292"

/** Blocks of one upload share endpoint, path and Request-Tag (RFC 7959 §2.5, RFC 9175 §3). */
const transferKey = (from: RemoteInfo, packet: ParsedPacket): string => {
  const path = packet.options.filter((o) => o.name === "Uri-Path").map((o) => o.value.toString()).join("/")
  const tag = packet.options.find((o) => String(o.name) === REQUEST_TAG)
  return `${from.address}|${from.port}|${path}|${tag === undefined ? "" : tag.value.toString("hex")}`
}

/**
 * Calls `sent` with every datagram handed to the socket and its destination, before it goes.
 * The coap package sends its acknowledgements and replies on the socket itself (the empty
 * ACK of a separate response from a timer of its own): this is where all of them pass.
 */
const watchSends = (socket: Socket, sent: (datagram: Uint8Array, port: number, address: string) => void) => {
  const send = socket.send
  socket.send = (...args: Array<unknown>): void => {
    // send(msg, offset, length, port, address?, callback?) or send(msg, port, address?, callback?)
    const [datagram, second, third] = args
    const ranged = typeof second === "number" && typeof third === "number"
    const port = ranged ? args[3] : second
    const address = ranged ? args[4] : third
    if (datagram instanceof Uint8Array && typeof port === "number" && typeof address === "string") {
      sent(ranged ? datagram.subarray(second, second + third) : datagram, port, address)
    }
    Reflect.apply(send, socket, args)
  }
}

/**
 * CoAP over UDP on `COAP_PORT` at `HOST`, on the socket `CoapListener` bound (API-DECISIONS
 * "CoAP"): `POST /events` and `POST /locations` → Envelope → Ingest, answered 2.01 once stored.
 *
 * The coap package parses requests and acknowledges Confirmable ones (piggybacked, or an
 * empty ACK and a separate response). Added here: `screen` (format errors, pings, critical
 * options not understood), Block1 reassembly that does not depend on tokens
 * (`makeTransfers`), and message deduplication by endpoint and message ID (`makeExchanges`):
 * a copy gets what was sent for the first (the piggybacked or NON response, or the empty
 * ACK of a separate one), or nothing while that is still being worked out, and never
 * reaches the handler. Every refusal is logged once as a warning; dropped datagrams at most
 * once per peer per `DROP_LOG_WINDOW_MS` and `MAX_DROP_LINES` in all. Closing the scope
 * stops reading, answers what is in flight (5.03 after `DRAIN_MS`) and closes the socket.
 */
export const CoapLive = Layer.effect(
  CoapServer,
  Effect.gen(function*() {
    const config = yield* AppConfig
    const socket = yield* (yield* CoapListener).open
    // Made after the socket: on close, handlers still running are interrupted before it closes.
    const fibers = yield* FiberSet.make()
    const runPromise = yield* FiberSet.runtimePromise(fibers)<Auth | Ingest>()
    const exchanges = makeExchanges()
    const transfers = makeTransfers(MAX_COAP_PAYLOAD_BYTES)
    const dropLog = makeLogLimit()
    /** Block1 of the last block of an upload, echoed in the response to the whole (RFC 7959 §2.3). */
    const echoes = new Map<string, Buffer>()
    /** Requests being answered by the handler, with `POST /events from 127.0.0.1:5683` for the log. */
    const pending = new Map<OutgoingMessage, string>()
    const answering = new Set<Promise<void>>()

    const warn = (line: string) => void runPromise(Effect.logWarning(line)).catch(() => undefined)
    const info = (line: string) => void runPromise(Effect.logInfo(line)).catch(() => undefined)
    /** A 4.xx is the client's business (info); a 5.xx is this server's (a warning). */
    const logRefusal = (request: string, reply: CoapReply) => {
      const line = refusalLine(request, reply)
      if (line !== undefined) (reply.code.startsWith("4.") ? info : warn)(line)
    }
    /** A datagram dropped, or rejected with a Reset: one line per peer per window at most (`makeLogLimit`). */
    const logDropped = (from: RemoteInfo, what: string, reason: string) => {
      const peer = endpointName(from.address, from.port)
      const held = dropLog.admit(peer, Date.now())
      if (held !== undefined) info(printable(withHeld(`coap datagram from ${peer} ${what}: ${reason}`, held)))
    }

    watchSends(socket, (datagram, port, address) => {
      countCoapSent()
      const messageId = answeredMessageId(datagram)
      if (messageId !== undefined) exchanges.answered(exchangeKey(address, port, messageId), datagram)
    })

    const server = createServer({ piggybackReplyMs: PIGGYBACK_REPLY_MS })
    server.on("request", (req: IncomingMessage, res: OutgoingMessage) => {
      const echo = echoes.get(exchangeKey(req.rsinfo.address, req.rsinfo.port, req._packet.messageId))
      const request = fromIncoming(req)
      const described = `${request.method} ${request.path} from ${endpointName(req.rsinfo.address, req.rsinfo.port)}`
      pending.set(res, described)
      const answered = runPromise(handleCoap(request)).then(
        (reply) => {
          if (!pending.delete(res)) return
          send(res, echo === undefined ? reply : { ...reply, block1: echo })
          logRefusal(described, reply)
        },
        // Interrupted: the server is closing and answers it 5.03.
        () => undefined
      )
      answering.add(answered)
      void answered.finally(() => answering.delete(answered))
    })
    server.on("error", (error: Error) => {
      warn(`coap: ${error.message}`)
    })

    const onMessage = (handle: (datagram: Buffer, from: RemoteInfo) => void) => (datagram: Buffer, from: RemoteInfo) => {
      countCoapReceived()
      const verdict = screen(datagram)
      if (verdict._tag === "drop") {
        countCoapDropped()
        return logDropped(from, "dropped", verdict.reason)
      }
      const reply = (answer: Uint8Array) => void socket.send(answer, from.port, from.address)
      if (verdict._tag === "answer") {
        reply(verdict.datagram)
        if (verdict.reason !== undefined) logDropped(from, "rejected with a Reset", verdict.reason)
        return
      }
      const packet = verdict.packet
      // An empty ACK or Reset: the package matches it to its separate response.
      if (packet.code === "0.00") return handle(datagram, from)
      const now = Date.now()
      const key = exchangeKey(from.address, from.port, packet.messageId)
      const copy = exchanges.find(key, now)
      if (copy !== undefined) {
        // A copy (RFC 7252 §4.5): what the first got, or nothing while its answer is being worked out.
        if (copy.answer !== undefined) reply(copy.answer)
        return
      }
      exchanges.open(key, now)
      /** Answers the request here, without the coap package; a refusal is logged. */
      const answerHere = (answer: CoapReply) => {
        reply(replyDatagram(packet, answer))
        logRefusal(`${describeRequest(packet)} from ${endpointName(from.address, from.port)}`, answer)
      }
      if (verdict._tag === "refuse") return answerHere(verdict.reply)
      if (!packet.options.some((o) => TAKEN_HERE.has(String(o.name)))) return handle(datagram, from)
      const options = packet.options.filter((o) => !TAKEN_HERE.has(String(o.name)))
      // Replies are one message, so Block2 NUM 0 (early size negotiation, RFC 7959 §2.4) is
      // dropped and the package never splits a reply; a later block does not exist.
      const block2Option = packet.options.find((o) => o.name === "Block2")
      const block2 = block2Option && parseBlock(block2Option.value)
      if (block2Option !== undefined && block2 === undefined) return answerHere(malformed("Block2"))
      if (block2 !== undefined && block2.num > 0) return answerHere(badBlock2())
      const block1Option = packet.options.find((o) => o.name === "Block1")
      if (block1Option === undefined) return handle(generate({ ...packet, options }, ANY_LENGTH), from)
      const block = parseBlock(block1Option.value)
      if (block === undefined) return answerHere(malformed("Block1"))
      const size1 = packet.options.find((o) => o.name === "Size1")
      const assembly = transfers.block(transferKey(from, packet), block, packet.payload, size1 && readUint(size1.value), now)
      if (assembly._tag === "reply") return answerHere(assembly.reply)
      // The whole upload as one request with the last block's message ID and token.
      echoes.set(key, blockValue(block))
      handle(generate({ ...packet, options, payload: assembly.payload }, ANY_LENGTH), from)
      echoes.delete(key)
    }

    yield* Effect.acquireRelease(
      Effect.sync(() => {
        // The package reads our socket; its datagrams go through `onMessage` first.
        server.listen(socket)
        socket.removeAllListeners("message")
        socket.on("message", onMessage(server.handleRequest()))
      }),
      () =>
        Effect.gen(function*() {
          socket.removeAllListeners("message")
          yield* Effect.promise(() => Promise.allSettled([...answering])).pipe(Effect.timeoutOption(DRAIN_MS))
          for (const [res, described] of pending) {
            send(res, shuttingDown)
            const line = refusalLine(described, shuttingDown)
            if (line !== undefined) yield* Effect.logWarning(line)
          }
          pending.clear()
          server.close()
        })
    )

    const { port } = socket.address()
    yield* Effect.logInfo(`coap listening on ${config.host}:${port}`)
    return CoapServer.of({ port })
  })
)
