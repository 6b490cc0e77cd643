import { generate, type ParsedPacket, parse } from "coap-packet"
import { uint } from "./blockwise.ts"
import type { CoapReply } from "./errors.ts"

/** What to do with a datagram before the coap package sees it. */
export type Screened =
  /** A request, or an empty ACK/RST ending the retransmission of one of our separate responses. */
  | { readonly _tag: "pass"; readonly packet: ParsedPacket }
  /** Silently ignored (RFC 7252 §3, §4.2, §4.3). */
  | { readonly _tag: "drop" }
  /** Answered at once with this datagram (a Reset). */
  | { readonly _tag: "answer"; readonly datagram: Buffer }

const drop: Screened = { _tag: "drop" }
const answer = (datagram: Buffer): Screened => ({ _tag: "answer", datagram })

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

/**
 * The message format of RFC 7252 §3, checked strictly: coap-packet parses leniently and
 * accepts token lengths 9–15, options running past the end and a payload marker with no
 * payload, all of which are format errors.
 */
export const wellFormed = (d: Uint8Array): boolean => {
  if (d.length < 4 || d[0] >> 6 !== 1) return false
  const tokenLength = d[0] & 0x0f
  if (tokenLength > 8) return false
  // §4.1: an Empty message is the 4-byte header alone.
  if (d[1] === 0) return d.length === 4 && tokenLength === 0
  let i = 4 + tokenLength
  if (i > d.length) return false
  while (i < d.length) {
    const byte = d[i++]
    if (byte === 0xff) return i < d.length
    const delta = byte >> 4
    const short = byte & 0x0f
    if (delta === 15 || short === 15) return false
    i += delta === 13 ? 1 : delta === 14 ? 2 : 0
    const extra = short === 13 ? 1 : short === 14 ? 2 : 0
    if (i + extra > d.length) return false
    const length = short === 13 ? d[i] + 13 : short === 14 ? d[i] * 256 + d[i + 1] + 269 : short
    i += extra + length
    if (i > d.length) return false
  }
  return true
}

const parsed = (datagram: Buffer): ParsedPacket | undefined => {
  try {
    return parse(datagram)
  } catch {
    return undefined
  }
}

const isConfirmableV1 = (d: Uint8Array) => d.length >= 4 && d[0] >> 6 === 1 && ((d[0] >> 4) & 0x3) === CON

/**
 * What the coap package (1.5) leaves out, checked on every datagram first:
 * - bytes that are not a well-formed CoAP 1 message: a Reset when they carry a Confirmable
 *   header, else nothing (RFC 7252 §3, §4.2, §4.3) — the package would answer some of them
 *   5.00, and to the wrong address;
 * - an empty Confirmable message (CoAP ping) gets its Reset (§4.3); empty ACK/RST messages
 *   pass (they end the retransmission of a separate response);
 * - responses and reserved codes are not for a server: a Reset if Confirmable, else dropped.
 */
export const screen = (datagram: Buffer): Screened => {
  const packet = wellFormed(datagram) ? parsed(datagram) : undefined
  if (packet === undefined) return isConfirmableV1(datagram) ? answer(reset(datagram.readUInt16BE(2))) : drop
  if (packet.code === "0.00") {
    if (packet.confirmable) return answer(reset(packet.messageId))
    return packet.ack || packet.reset ? { _tag: "pass", packet } : drop
  }
  if (!packet.code.startsWith("0.")) return packet.confirmable ? answer(reset(packet.messageId)) : drop
  if (packet.ack || packet.reset) return drop
  return { _tag: "pass", packet }
}
