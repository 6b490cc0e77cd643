import type { Client } from "aedes"
import { Predicate } from "effect"
import { EventEmitter } from "node:events"

/** Largest packet before CONNECT is accepted: a CONNECT with its credential and a will. */
export const MAX_PACKET_BYTES_UNAUTHENTICATED = 64 * 1024
/** Largest packet of an authenticated session: an event's data (256 KiB) with room for its JSON. */
export const MAX_PACKET_BYTES = 512 * 1024

/** mqtt-packet's parser, which aedes keeps per connection, as far as the guard uses it. */
interface PacketParser extends EventEmitter {
  parse(buffer: Buffer): number
  readonly packet: { readonly length: number }
}

const isPacketParser = (value: unknown): value is PacketParser =>
  value instanceof EventEmitter && typeof Reflect.get(value, "parse") === "function" && Predicate.isObject(Reflect.get(value, "packet"))

/** A publish or subscription the guard closed its connection over: aedes still reads it on. */
const dropped = new WeakSet<object>()

/** Whether a publish or subscription came on a connection the guard closed because of it. */
export const isDropped = (packetOrSubscription: object): boolean => dropped.has(packetOrSubscription)

/** The parts of a packet naming a topic, each with the topic, as mqtt-packet emits them. */
const topicsOf = (packet: unknown): Array<{ readonly part: object; readonly topic: unknown }> => {
  if (!Predicate.isObject(packet)) return []
  const cmd = Reflect.get(packet, "cmd")
  if (cmd === "publish") return [{ part: packet, topic: Reflect.get(packet, "topic") }]
  if (cmd === "unsubscribe") {
    const list: unknown = Reflect.get(packet, "unsubscriptions")
    return Array.isArray(list) ? list.map((topic: unknown) => ({ part: packet, topic })) : []
  }
  if (cmd !== "subscribe") return []
  const list: unknown = Reflect.get(packet, "subscriptions")
  if (!Array.isArray(list)) return []
  return list.flatMap((s: unknown) => Predicate.isObject(s) ? [{ part: s, topic: Reflect.get(s, "topic") }] : [])
}

/**
 * mqtt-packet decodes strings with `Buffer.toString`, which turns ill-formed UTF-8 into
 * U+FFFD; a topic holding it (or U+0000) was not well-formed, and the connection is closed
 * [MQTT-1.5.3-1, MQTT-1.5.3-2]. No topic of the interface contains either character.
 */
const illFormed = (topic: unknown) => typeof topic === "string" && /[\uFFFD\u0000]/.test(topic)

export interface GuardOptions {
  /** The largest packet the connection may send now (it grows once CONNECT is accepted). */
  readonly maxBytes: () => number
  /** Called once, with what was wrong; the guard has already closed the connection. */
  readonly onViolation: (reason: string) => void
}

/**
 * Watches what a connection sends before aedes acts on it:
 * - a packet whose fixed header declares more than `maxBytes()` closes the connection as soon
 *   as its remaining length is read, before its body is buffered (aedes sets no limit, so one
 *   client could otherwise make the broker hold up to 256 MB, unauthenticated);
 * - a topic of ill-formed UTF-8 closes it;
 * - a subscription asking for QoS 2 is granted QoS 1, the highest this broker delivers, so the
 *   SUBACK says what the subscriber will get [MQTT-3.9.3-2 allows a lower grant].
 *
 * It hooks the parser aedes gives each client (`client._parser`, mqtt-packet's), checked at
 * run time: if a new aedes changes that, `guard` reports it rather than guarding nothing.
 */
export const guardConnection = (client: Client, options: GuardOptions): boolean => {
  const parser: unknown = Reflect.get(client, "_parser")
  if (!isPacketParser(parser)) return false
  let violated = false
  const violation = (reason: string) => {
    if (violated) return
    violated = true
    client.conn.destroy()
    options.onViolation(reason)
  }
  const parse = parser.parse.bind(parser)
  parser.parse = (buffer: Buffer) => {
    const left = parse(buffer)
    // The length of the packet being read (-1 between packets); its body is still arriving.
    const declared = parser.packet.length
    if (declared > options.maxBytes()) violation(`packet of ${declared} bytes exceeds the limit of ${options.maxBytes()} bytes`)
    return left
  }
  parser.prependListener("packet", (packet: unknown) => {
    const topics = topicsOf(packet)
    // A packet that arrived whole in one read (a WebSocket message) was never seen half-read.
    const length: unknown = Predicate.isObject(packet) ? Reflect.get(packet, "length") : undefined
    if (typeof length === "number" && length > options.maxBytes()) {
      for (const { part } of topics) dropped.add(part)
      return violation(`packet of ${length} bytes exceeds the limit of ${options.maxBytes()} bytes`)
    }
    if (topics.some(({ topic }) => illFormed(topic))) {
      for (const { part } of topics) dropped.add(part)
      return violation("topic is not well-formed UTF-8")
    }
    if (Predicate.isObject(packet) && Reflect.get(packet, "cmd") === "subscribe") {
      const subscriptions: unknown = Reflect.get(packet, "subscriptions")
      if (Array.isArray(subscriptions)) {
        for (const subscription of subscriptions) {
          if (Predicate.isObject(subscription) && Reflect.get(subscription, "qos") === 2) Reflect.set(subscription, "qos", 1)
        }
      }
    }
  })
  return true
}
