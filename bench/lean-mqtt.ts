/**
 * The publishing side of an MQTT 3.1.1 client, and nothing more, for the load processes of
 * `bench/ingest.ts`: a TCP socket, `mqtt-packet` to encode and parse, and a map of the
 * publishes waiting for their PUBACK. What is measured is the broker, so the load should cost
 * the shared machine as little as it can. mqtt.js (which the tests, the subscriber and the idle
 * connections use) spent about 70 µs of CPU per QoS 1 publish here, two thirds of it in
 * JavaScript (its outgoing store, message-id allocator, write queue and callbacks), and the
 * two load processes took as much of the 2 cores as the server under test.
 *
 * Packets go out with `mqtt-packet`'s `writeToStream`, as in mqtt.js: corked until the next tick,
 * so what one turn of the event loop publishes on a connection is one write. With a plain
 * `socket.write` per publish, Nagle held a connection's second publish until the first was
 * acknowledged, and the closed-loop cases stored ~12 % fewer events/s than with mqtt.js.
 *
 * An `mqtts:` URL connects with `tls.connect` instead, everything else the same: Nagle stays on
 * as on TCP (no `setNoDelay` on either), and the corked writes of a tick reach the TLS socket as
 * one `writev`, which Node's TLS layer joins before encrypting (one record up to 16 KB), so a
 * tick's publishes on a connection are still one write to TCP.
 *
 * It also subscribes, for the devices of the command case (`bench/commands-load.ts`): a
 * SUBSCRIBE answered by its SUBACK, and each publish that arrives handed to `onMessage`, with
 * its PUBACK at QoS 1. Those devices ran on mqtt.js: with its 1,000 clients the load's process had
 * 4-8 scavenges over 5 ms per case (up to 14 ms), each counted as the latency of the runs in flight.
 *
 * No keep-alive (CONNECT with keepalive 0), no reconnection, no QoS 2: a case lasts seconds,
 * and a lost connection fails what it had in flight.
 */
import { createConnection, isIP, type Socket } from "node:net"
import { connect as tlsConnect } from "node:tls"
import mqttPacket from "mqtt-packet"

export type Outcome = { readonly kind: "ok" } | { readonly kind: "refused" } | { readonly kind: "error"; readonly error: string }
export const OK: Outcome = { kind: "ok" }
export const REFUSED: Outcome = { kind: "refused" }

const QOS0_DONE: Promise<Outcome> = Promise.resolve(OK)

export class LeanMqttClient {
  connected = false
  private readonly socket: Socket
  private readonly waiting = new Map<number, (outcome: Outcome) => void>()
  private readonly closeHandlers: Array<() => void> = []
  private readonly subscribing = new Map<number, (refused: string | undefined) => void>()
  private messageHandler: ((topic: string, payload: Buffer) => void) | undefined = undefined
  private nextId = 0

  private constructor(socket: Socket) {
    this.socket = socket
  }

  /**
   * Connects with `username` as the credential (the password is ignored by Voltaic). `mqtts:`
   * connects over TLS and verifies the broker's certificate against `ca` (PEM) when given, as a
   * device would, host name included; without `ca`, against Node's default roots.
   */
  static connect(url: string, clientId: string, username: string, options: { readonly ca?: string; readonly timeoutMs?: number } = {}): Promise<LeanMqttClient> {
    const { protocol, hostname, port } = new URL(url)
    const secure = protocol === "mqtts:"
    const timeoutMs = options.timeoutMs ?? 30_000
    return new Promise((resolveClient, reject) => {
      const address = { host: hostname, port: port === "" ? (secure ? 8883 : 1883) : Number(port) }
      const socket: Socket = secure
        // An IP address is no TLS server name (RFC 6066); its certificate is then checked against the IP.
        ? tlsConnect({ ...address, ...(isIP(hostname) === 0 ? { servername: hostname } : {}), ...(options.ca === undefined ? {} : { ca: options.ca }) })
        : createConnection(address)
      const client = new LeanMqttClient(socket)
      const parser = mqttPacket.parser({ protocolVersion: 4 })
      let settled = false
      const fail = (error: Error) => {
        if (settled) return
        settled = true
        socket.destroy()
        reject(error)
      }
      const timer = setTimeout(() => fail(new Error("no CONNACK in time")), timeoutMs)
      parser.on("packet", (packet) => {
        if (packet.cmd === "puback") {
          const id = packet.messageId ?? -1
          const resolvePublish = client.waiting.get(id)
          if (resolvePublish !== undefined) {
            client.waiting.delete(id)
            resolvePublish(OK)
          }
        } else if (packet.cmd === "publish") {
          if (packet.qos === 1) mqttPacket.writeToStream({ cmd: "puback", messageId: packet.messageId ?? 0 }, socket)
          client.messageHandler?.(packet.topic, Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload))
        } else if (packet.cmd === "suback") {
          const id = packet.messageId ?? -1
          const resolveSubscribe = client.subscribing.get(id)
          if (resolveSubscribe !== undefined) {
            client.subscribing.delete(id)
            resolveSubscribe(packet.granted.every((g) => typeof g === "number" && g < 0x80) ? undefined : "refused")
          }
        } else if (packet.cmd === "connack") {
          clearTimeout(timer)
          if (packet.returnCode !== 0) return fail(new Error(`CONNACK refused: return code ${packet.returnCode}`))
          settled = true
          client.connected = true
          resolveClient(client)
        }
      })
      parser.on("error", (error: Error) => {
        client.failWaiting(`bad packet from the broker: ${error.message}`)
        socket.destroy()
      })
      socket.on("data", (chunk: Buffer) => parser.parse(chunk))
      socket.on("error", (error) => {
        clearTimeout(timer)
        fail(error)
      })
      socket.on("close", () => {
        clearTimeout(timer)
        fail(new Error("closed before CONNACK"))
        client.connected = false
        client.failWaiting("connection closed")
        for (const handler of client.closeHandlers.splice(0)) handler()
      })
      socket.write(
        mqttPacket.generate({
          cmd: "connect",
          protocolId: "MQTT",
          protocolVersion: 4,
          clientId,
          clean: true,
          keepalive: 0,
          ...(username === "" ? {} : { username, password: Buffer.from(" ") })
        })
      )
    })
  }

  /** Resolves once the packet is written (QoS 0) or its PUBACK came (QoS 1). */
  publish(topic: string, payload: string, qos: 0 | 1): Promise<Outcome> {
    if (!this.connected) return Promise.resolve({ kind: "error", error: "not connected" })
    if (qos === 0) {
      // As mqtt.js: done once written, or once drained when the socket's buffer is full.
      if (mqttPacket.writeToStream({ cmd: "publish", topic, payload, qos: 0, dup: false, retain: false }, this.socket)) return QOS0_DONE
      return new Promise((resolvePublish) => this.socket.once("drain", () => resolvePublish(OK)))
    }
    const messageId = this.takeId()
    return new Promise((resolvePublish) => {
      this.waiting.set(messageId, resolvePublish)
      mqttPacket.writeToStream({ cmd: "publish", topic, payload, qos: 1, messageId, dup: false, retain: false }, this.socket)
    })
  }

  /** Resolves once the broker's SUBACK granted the subscription (rejects when it refused it). */
  subscribe(topic: string, qos: 0 | 1): Promise<void> {
    if (!this.connected) return Promise.reject(new Error("not connected"))
    const messageId = this.takeId()
    return new Promise((resolveSubscribe, reject) => {
      this.subscribing.set(messageId, (refused) => (refused === undefined ? resolveSubscribe() : reject(new Error(`SUBSCRIBE ${topic}: ${refused}`))))
      mqttPacket.writeToStream({ cmd: "subscribe", messageId, subscriptions: [{ topic, qos }] }, this.socket)
    })
  }

  /** Every publish that arrives on a subscription. */
  onMessage(handler: (topic: string, payload: Buffer) => void): void {
    this.messageHandler = handler
  }

  onClose(handler: () => void): void {
    if (this.socket.destroyed) handler()
    else this.closeHandlers.push(handler)
  }

  end(): void {
    this.connected = false
    this.socket.destroy()
  }

  private takeId(): number {
    let messageId = this.nextId % 65535 + 1
    while (this.waiting.has(messageId) || this.subscribing.has(messageId)) messageId = messageId % 65535 + 1
    this.nextId = messageId
    return messageId
  }

  private failWaiting(error: string) {
    for (const resolvePublish of this.waiting.values()) resolvePublish({ kind: "error", error })
    this.waiting.clear()
    for (const settleSubscribe of this.subscribing.values()) settleSubscribe(error)
    this.subscribing.clear()
  }
}
