/**
 * MQTT 3.1.1 over any duplex (a TCP socket, or an in-memory pair served by aedes `handle()`),
 * with `mqtt-packet` alone: a session per lane that pipelines its inputs and answers the
 * deliveries it receives, and one-shot connections for raw bytes.
 */
import mqttPacket from "mqtt-packet"
import type { Duplex } from "node:stream"
import type { MqttInput, SessionPacket } from "../generators/index.ts"
import type { Verdict } from "../tally.ts"

export type OpenStream = () => Duplex

export interface Answer {
  readonly outcome: string
  readonly verdict: Verdict
}

/**
 * A raw connection closed by the server was refused; a session's publishes in flight when it
 * closes are lost (a refusal among them may have closed it, after they were stored).
 */
const CLOSED: Answer = { outcome: "closed by server", verdict: "refused" }
const CLOSED_IN_FLIGHT: Answer = { outcome: "closed by server", verdict: "lost" }

let clients = 0

/** One MQTT session with a credential; reconnects on the next send after the server closed it. */
export class MqttSession {
  private stream: Duplex | undefined
  private connecting: Promise<number | string> | undefined
  private readonly inflight = new Map<number, (answer: Answer) => void>()
  private readonly pings: Array<(answer: Answer) => void> = []
  private readonly closeWaiters: Array<() => void> = []
  private observer: ((cmd: string) => void) | undefined
  private nextId = 0
  /** CONNECTs sent and deliveries received, for the report. */
  connects = 0
  deliveries = 0

  /** `probeTimeoutMs`: how long a mutated packet's PINGRESP is awaited (a wrong length can swallow the PINGREQ). */
  constructor(
    /** Names the session in its client ids (`fuzz-<name>-<n>`), so the server's log tells the lanes apart. */
    private readonly name: string,
    private readonly open: OpenStream,
    private readonly key: string,
    private readonly timeoutMs: number,
    private readonly probeTimeoutMs: number
  ) {}

  /** Connects if needed; resolves with the CONNACK return code, or why there was none. */
  connect(): Promise<number | string> {
    if (this.stream !== undefined && this.connecting !== undefined) return this.connecting
    const stream = this.open()
    this.stream = stream
    this.connects += 1
    const parser = mqttPacket.parser({ protocolVersion: 4 })
    this.connecting = new Promise<number | string>((resolve) => {
      const timer = setTimeout(() => {
        resolve("no CONNACK")
        stream.destroy()
      }, this.timeoutMs)
      const done = (result: number | string) => {
        clearTimeout(timer)
        resolve(result)
      }
      parser.on("packet", (packet) => {
        if (packet.cmd === "connack") done(packet.returnCode ?? -1)
        else this.onPacket(stream, packet)
      })
      parser.on("error", (error) => {
        done(`malformed answer: ${error.message}`)
        stream.destroy()
      })
      stream.on("data", (chunk: Buffer) => parser.parse(chunk))
      stream.on("error", () => {})
      stream.on("close", () => {
        done("closed before CONNACK")
        if (this.stream === stream) {
          this.stream = undefined
          this.connecting = undefined
        }
        for (const resolve of this.inflight.values()) resolve(CLOSED_IN_FLIGHT)
        this.inflight.clear()
        for (const resolve of this.pings.splice(0)) resolve(CLOSED_IN_FLIGHT)
        for (const resolve of this.closeWaiters.splice(0)) resolve()
      })
      stream.write(mqttPacket.generate({
        cmd: "connect",
        protocolId: "MQTT",
        protocolVersion: 4,
        clientId: `fuzz-${this.name}-${++clients}`,
        clean: true,
        keepalive: 0,
        username: this.key,
        password: Buffer.from(" ")
      }))
    })
    return this.connecting
  }

  private onPacket(stream: Duplex, packet: mqttPacket.Packet) {
    this.observer?.(packet.cmd)
    switch (packet.cmd) {
      case "puback":
      case "pubcomp":
      case "unsuback":
        return this.settle(packet.messageId, { outcome: packet.cmd.toUpperCase(), verdict: "acked" })
      case "pubrec":
        return stream.write(mqttPacket.generate({ cmd: "pubrel", messageId: packet.messageId ?? 0 }))
      case "suback": {
        // MQTT 3.1.1 return codes are numbers; 0x80 is a failure [MQTT-3.9.3].
        const refused = packet.granted.some((g) => typeof g !== "number" || g >= 0x80)
        return this.settle(packet.messageId, refused ? { outcome: "SUBACK 0x80", verdict: "refused" } : { outcome: "SUBACK granted", verdict: "acked" })
      }
      case "pingresp":
        return this.pings.shift()?.({ outcome: "PINGRESP", verdict: "acked" })
      case "publish":
        this.deliveries += 1
        if (packet.qos > 0) stream.write(mqttPacket.generate({ cmd: "puback", messageId: packet.messageId ?? 0 }))
        return
    }
  }

  private settle(messageId: number | undefined, answer: Answer) {
    const resolve = messageId === undefined ? undefined : this.inflight.get(messageId)
    if (resolve === undefined) return
    this.inflight.delete(messageId ?? -1)
    resolve(answer)
  }

  private allocate(): number {
    let id = this.nextId % 65535 + 1
    while (this.inflight.has(id)) id = id % 65535 + 1
    this.nextId = id
    return id
  }

  private awaitAnswer(register: (resolve: (answer: Answer) => void) => void, onTimeout: () => void, timeoutMs = this.timeoutMs): Promise<Answer> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        onTimeout()
        resolve({ outcome: "no answer (timeout)", verdict: "lost" })
      }, timeoutMs)
      register((answer) => {
        clearTimeout(timer)
        resolve(answer)
      })
    })
  }

  /** Sends one packet of the session and resolves with its answer. */
  async send(packet: SessionPacket): Promise<Answer> {
    const code = await this.connect()
    const stream = this.stream
    if (code !== 0 || stream === undefined) return { outcome: `not connected (${typeof code === "number" ? `CONNACK ${code}` : code})`, verdict: "lost" }
    if (packet.cmd === "pingreq") {
      return this.awaitAnswer((resolve) => {
        this.pings.push(resolve)
        stream.write(mqttPacket.generate({ cmd: "pingreq" }))
      }, () => stream.destroy())
    }
    if (packet.cmd === "publish" && packet.qos === 0) {
      stream.write(mqttPacket.generate({ cmd: "publish", topic: packet.topic, payload: packet.payload, qos: 0, dup: false, retain: false }))
      return { outcome: "QoS 0 sent", verdict: "none" }
    }
    const messageId = this.allocate()
    return this.awaitAnswer((resolve) => {
      this.inflight.set(messageId, resolve)
      stream.write(
        packet.cmd === "publish"
          ? mqttPacket.generate({ cmd: "publish", topic: packet.topic, payload: packet.payload, qos: packet.qos, messageId, dup: false, retain: false })
          : packet.cmd === "subscribe"
          ? mqttPacket.generate({ cmd: "subscribe", messageId, subscriptions: [{ topic: packet.topic, qos: packet.qos }] })
          : mqttPacket.generate({ cmd: "unsubscribe", messageId, unsubscriptions: [packet.topic] })
      )
    }, () => this.inflight.delete(messageId))
  }

  /**
   * Writes `bytes` (a mutated packet) followed by a PINGREQ, and resolves with every packet
   * answered up to the PINGRESP, or the close. One at a time per session.
   */
  async probe(bytes: Buffer): Promise<Answer> {
    const code = await this.connect()
    const stream = this.stream
    if (code !== 0 || stream === undefined) return { outcome: `not connected (${typeof code === "number" ? `CONNACK ${code}` : code})`, verdict: "lost" }
    const seen: Array<string> = []
    // Deliveries (PUBLISH) to a subscription the probe made are not answers to it.
    this.observer = (cmd) => {
      if (cmd !== "pingresp" && cmd !== "publish") seen.push(cmd.toUpperCase())
    }
    const answer = await this.awaitAnswer((resolve) => {
      this.pings.push(resolve)
      stream.write(bytes)
      stream.write(mqttPacket.generate({ cmd: "pingreq" }))
    }, () => stream.destroy(), this.probeTimeoutMs)
    this.observer = undefined
    const before = seen.length === 0 ? "" : `${seen.join("+")} then `
    return { outcome: `${before}${answer.outcome}`, verdict: answer.verdict === "acked" ? "acked" : answer.verdict }
  }

  close(): Promise<void> {
    const stream = this.stream
    if (stream === undefined || stream.destroyed) return Promise.resolve()
    return new Promise((resolve) => {
      this.closeWaiters.push(resolve)
      stream.end(mqttPacket.generate({ cmd: "disconnect" }))
      setTimeout(() => stream.destroy(), 1_000).unref()
    })
  }
}

/** Raw bytes on a fresh connection: the first packet answered, the close, or silence for `timeoutMs`. */
export const sendRaw = (open: OpenStream, bytes: Buffer, timeoutMs: number): Promise<Answer> =>
  new Promise((resolve) => {
    const stream = open()
    const parser = mqttPacket.parser({ protocolVersion: 4 })
    let answered = false
    const finish = (answer: Answer) => {
      if (answered) return
      answered = true
      clearTimeout(timer)
      resolve(answer)
      stream.destroy()
    }
    const timer = setTimeout(() => finish({ outcome: "no answer (raw, timeout)", verdict: "lost" }), timeoutMs)
    parser.on("packet", (packet) =>
      finish(packet.cmd === "connack"
        ? { outcome: `CONNACK ${packet.returnCode ?? "?"}`, verdict: packet.returnCode === 0 ? "acked" : "refused" }
        : { outcome: packet.cmd.toUpperCase(), verdict: "acked" }))
    parser.on("error", (error) => finish({ outcome: `malformed answer: ${error.message}`, verdict: "failed" }))
    stream.on("data", (chunk: Buffer) => parser.parse(chunk))
    stream.on("error", () => {})
    stream.on("close", () => finish(CLOSED))
    stream.write(bytes)
  })

/** What an input of the lanes answered. */
export const sendMqtt = (session: MqttSession | undefined, open: OpenStream, input: MqttInput, rawTimeoutMs: number): Promise<Answer> =>
  input.lane === "raw" || session === undefined
    ? sendRaw(open, input.bytes ?? Buffer.alloc(0), rawTimeoutMs)
    : input.packet !== undefined
    ? session.send(input.packet)
    : session.probe(input.bytes ?? Buffer.alloc(0))
