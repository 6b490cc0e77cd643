import { generate, type ParsedPacket, parse } from "coap-packet"
import { isIPv6 } from "node:net"
import { uint } from "./blockwise.ts"
import { badOption, type CoapReply, proxyingNotSupported } from "./errors.ts"

/** What to do with a datagram before the coap package sees it. */
export type Screened =
  /** A request, or an empty ACK/RST ending the retransmission of one of our separate responses. */
  | { readonly _tag: "pass"; readonly packet: ParsedPacket }
  /** Silently ignored (RFC 7252 §3, §4.2, §4.3) for this reason. */
  | { readonly _tag: "drop"; readonly reason: string }
  /** Answered at once with this datagram (a Reset): rejected for `reason`, or a CoAP ping (no reason). */
  | { readonly _tag: "answer"; readonly datagram: Buffer; readonly reason: string | undefined }
  /** A request refused before it is handled, with this reply (piggybacked on the ACK of a CON). */
  | { readonly _tag: "refuse"; readonly packet: ParsedPacket; readonly reply: CoapReply }

const drop = (reason: string): Screened => ({ _tag: "drop", reason })
const answer = (datagram: Buffer, reason: string | undefined): Screened => ({ _tag: "answer", datagram, reason })

const CON = 0

/** RFC 7252 §4.2: a Confirmable message that cannot be processed is rejected with a matching Reset. */
const reset = (messageId: number): Buffer => generate({ code: "0.00", reset: true, messageId, token: Buffer.alloc(0) })

/** A response to `packet` sent without the coap package: piggybacked on the ACK of a CON, else NON. */
export const replyDatagram = (packet: Pick<ParsedPacket, "confirmable" | "messageId" | "token">, reply: CoapReply): Buffer => {
  const options: Array<{ name: string; value: Buffer }> = []
  if (reply.payload !== "") options.push({ name: "Content-Format", value: Buffer.of(50) })
  if (reply.block1 !== undefined) options.push({ name: "Block1", value: Buffer.from(reply.block1) })
  if (reply.size1 !== undefined) options.push({ name: "Size1", value: uint(reply.size1) })
  if (reply.maxAge !== undefined) options.push({ name: "Max-Age", value: uint(reply.maxAge) })
  return generate({
    code: reply.code,
    messageId: packet.messageId,
    token: packet.token,
    ack: packet.confirmable,
    confirmable: false,
    options,
    payload: Buffer.from(reply.payload)
  })
}

/** A datagram read as far as `screen` needs: its option numbers, or why it breaks the format. */
type Read = { readonly _tag: "message"; readonly options: ReadonlyArray<number> } | { readonly _tag: "malformed"; readonly reason: string }

const malformed = (reason: string): Read => ({ _tag: "malformed", reason })

/** An extended option delta or length (RFC 7252 §3.1): its value and how many bytes it takes. */
const extended = (d: Uint8Array, i: number, nibble: number): { readonly value: number; readonly bytes: number } =>
  nibble === 13 ? { value: d[i] + 13, bytes: 1 } : nibble === 14 ? { value: d[i] * 256 + d[i + 1] + 269, bytes: 2 } : { value: nibble, bytes: 0 }

/**
 * The message format of RFC 7252 §3, checked strictly: coap-packet parses leniently and
 * accepts token lengths 9–15, options running past the end and a payload marker with no
 * payload, all of which are format errors.
 */
const read = (d: Uint8Array): Read => {
  if (d.length < 4) return malformed(`${d.length} bytes, shorter than a CoAP header`)
  if (d[0] >> 6 !== 1) return malformed(`CoAP version ${d[0] >> 6}, not 1`)
  const tokenLength = d[0] & 0x0f
  if (tokenLength > 8) return malformed(`token length ${tokenLength}, more than 8`)
  // §4.1: an Empty message is the 4-byte header alone.
  if (d[1] === 0) return d.length === 4 && tokenLength === 0 ? { _tag: "message", options: [] } : malformed("an Empty message with more than a header")
  let i = 4 + tokenLength
  if (i > d.length) return malformed("token longer than the datagram")
  const options: Array<number> = []
  while (i < d.length) {
    const byte = d[i++]
    if (byte === 0xff) return i < d.length ? { _tag: "message", options } : malformed("payload marker without a payload")
    if (byte >> 4 === 15 || (byte & 0x0f) === 15) return malformed("reserved option nibble 15")
    const delta = extended(d, i, byte >> 4)
    const length = extended(d, i + delta.bytes, byte & 0x0f)
    i += delta.bytes + length.bytes
    if (i > d.length || Number.isNaN(delta.value + length.value)) return malformed("option header past the end")
    options.push((options.at(-1) ?? 0) + delta.value)
    i += length.value
    if (i > d.length) return malformed("option value past the end")
  }
  return { _tag: "message", options }
}

/** Whether a datagram is a well-formed CoAP 1 message (RFC 7252 §3). */
export const wellFormed = (d: Uint8Array): boolean => read(d)._tag === "message"

const parsed = (datagram: Buffer): ParsedPacket | undefined => {
  try {
    return parse(datagram)
  } catch {
    return undefined
  }
}

const isConfirmableV1 = (d: Uint8Array) => d.length >= 4 && d[0] >> 6 === 1 && ((d[0] >> 4) & 0x3) === CON

/**
 * Critical options (odd numbers, RFC 7252 §5.4.1) this server acts on: Uri-Host and Uri-Port
 * (it serves one origin), Uri-Path, Uri-Query (which neither resource reads), Accept (replies
 * are JSON), Block2 and Block1. Any other critical option refuses the request.
 */
const UNDERSTOOD_CRITICAL = new Set([3, 7, 11, 15, 17, 23, 27])

/** Proxy-Uri and Proxy-Scheme ask for a forward-proxy (RFC 7252 §5.7.2). */
const PROXY_OPTIONS = new Set([35, 39])

/**
 * A request with a critical option not understood here (RFC 7252 §5.4.1): 4.02 to a CON,
 * piggybacked; a NON is rejected, that is ignored (§4.3). Proxy-Uri and Proxy-Scheme are
 * answered 5.05 (§5.7.2).
 */
const checkOptions = (packet: ParsedPacket, options: ReadonlyArray<number>): Screened => {
  const option = options.find((n) => n % 2 === 1 && !UNDERSTOOD_CRITICAL.has(n))
  if (option === undefined) return { _tag: "pass", packet }
  if (PROXY_OPTIONS.has(option)) return { _tag: "refuse", packet, reply: proxyingNotSupported() }
  if (packet.confirmable) return { _tag: "refuse", packet, reply: badOption(option) }
  return drop(`a Non-confirmable request with critical option ${option}, not understood here (RFC 7252 §5.4.1)`)
}

/**
 * What the coap package (1.5) leaves out, checked on every datagram first:
 * - bytes that are not a well-formed CoAP 1 message: a Reset when they carry a Confirmable
 *   header, else nothing (RFC 7252 §3, §4.2, §4.3) — the package would answer some of them
 *   5.00, and to the wrong address;
 * - an empty Confirmable message (CoAP ping) gets its Reset (§4.3); empty ACK/RST messages
 *   pass (they end the retransmission of a separate response);
 * - responses and reserved codes are not for a server: a Reset if Confirmable, else dropped;
 * - a request with a critical option not understood here is refused (`checkOptions`).
 * Every verdict but a pass or a ping carries the reason, for the log.
 */
export const screen = (datagram: Buffer): Screened => {
  const message = read(datagram)
  const packet = message._tag === "message" ? parsed(datagram) : undefined
  if (message._tag === "malformed" || packet === undefined) {
    const reason = `malformed (RFC 7252 §3): ${message._tag === "malformed" ? message.reason : "coap-packet cannot parse it"}`
    return isConfirmableV1(datagram) ? answer(reset(datagram.readUInt16BE(2)), reason) : drop(reason)
  }
  if (packet.code === "0.00") {
    if (packet.confirmable) return answer(reset(packet.messageId), undefined)
    return packet.ack || packet.reset ? { _tag: "pass", packet } : drop("an Empty Non-confirmable message (RFC 7252 §4.3)")
  }
  if (!packet.code.startsWith("0.")) {
    const reason = `code ${packet.code}, not a request`
    return packet.confirmable ? answer(reset(packet.messageId), reason) : drop(reason)
  }
  if (packet.ack || packet.reset) return drop(`a request (${packet.code}) sent as ${packet.ack ? "an ACK" : "a Reset"}`)
  return checkOptions(packet, message.options)
}

const METHODS: Record<string, string> = { "0.01": "GET", "0.02": "POST", "0.03": "PUT", "0.04": "DELETE", "0.05": "FETCH", "0.06": "PATCH", "0.07": "iPATCH" }

/** `POST /events`: a request's method (or raw code) and Uri-Path, as the log names it. */
export const describeRequest = (packet: Pick<ParsedPacket, "code" | "options">): string => {
  const path = packet.options.filter((o) => o.name === "Uri-Path").map((o) => o.value.toString()).join("/")
  return `${METHODS[packet.code] ?? packet.code} /${path}`
}

/** `127.0.0.1:5683`, `[::1]:5683`: a peer as the log names it. */
export const endpointName = (address: string, port: number): string => (isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`)
