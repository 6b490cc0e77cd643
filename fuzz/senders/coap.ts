/**
 * CoAP datagrams over UDP with answers matched to requests: by message id (piggybacked
 * answers, Resets) or by token (separate answers, which are acknowledged). A socket is retired
 * before its message ids wrap: a repeated id from the same endpoint within EXCHANGE_LIFETIME
 * is a copy the server answers from its cache (RFC 7252 §4.5), not a new request.
 */
import { generate, parse } from "coap-packet"
import { createSocket, type Socket } from "node:dgram"
import type { CoapInput } from "../generators/index.ts"
import type { Answer } from "./mqtt.ts"

const IDS_PER_SOCKET = 60_000

interface Pending {
  readonly token: string
  readonly resolve: (answer: Answer) => void
}

const verdictOf = (code: string): Answer["verdict"] =>
  code.startsWith("2.") ? "acked" : code === "5.03" ? "busy" : code === "5.05" ? "refused" : code.startsWith("5.") ? "failed" : "refused"

class Endpoint {
  readonly socket: Socket
  used = 0
  private readonly byId = new Map<number, Pending>()
  private readonly byToken = new Map<string, Pending>()

  constructor(private readonly host: string, private readonly port: () => number, private readonly onStray: (what: string) => void) {
    this.socket = createSocket("udp4")
    this.socket.on("message", (datagram) => this.receive(datagram))
    this.socket.on("error", () => {})
  }

  /** Sends made while it binds are queued by dgram. */
  bind(): void {
    this.socket.bind(0, this.host)
  }

  get busy() {
    return this.byId.size + this.byToken.size > 0
  }

  private receive(datagram: Buffer) {
    let packet: ReturnType<typeof parse>
    try {
      packet = parse(datagram)
    } catch {
      return this.onStray("unparseable answer")
    }
    const token = packet.token.toString("hex")
    // A separate answer comes as a CON of its own: acknowledge it, or it is sent again (§5.2.2).
    if (packet.confirmable) this.socket.send(generate({ code: "0.00", ack: true, messageId: packet.messageId, token: Buffer.alloc(0) }), this.port(), this.host)
    if (packet.reset) return this.finish(this.byId.get(packet.messageId), { outcome: "RST", verdict: "refused" })
    if (packet.code === "0.00") {
      // An empty ACK: the answer follows separately, matched by token.
      const pending = this.byId.get(packet.messageId)
      if (pending !== undefined) {
        this.byId.delete(packet.messageId)
        this.byToken.set(pending.token, pending)
      }
      return
    }
    const pending = (packet.ack ? this.byId.get(packet.messageId) : undefined) ?? this.byToken.get(token)
    if (pending === undefined) return this.onStray(`unmatched ${packet.code}`)
    this.finish(pending, { outcome: packet.code, verdict: verdictOf(packet.code) })
  }

  private finish(pending: Pending | undefined, answer: Answer) {
    if (pending === undefined) return
    for (const [id, p] of this.byId) if (p === pending) this.byId.delete(id)
    this.byToken.delete(pending.token)
    pending.resolve(answer)
  }

  send(datagram: Buffer, messageId: number, token: Buffer, timeoutMs: number): Promise<Answer> {
    return new Promise((resolve) => {
      const pending: Pending = {
        token: token.toString("hex"),
        resolve: (answer) => {
          clearTimeout(timer)
          resolve(answer)
        }
      }
      const timer = setTimeout(() => this.finish(pending, { outcome: "no answer (timeout)", verdict: "lost" }), timeoutMs)
      this.byId.set(messageId, pending)
      this.byToken.set(pending.token, pending)
      this.socket.send(datagram, this.port(), this.host, (error) => {
        if (error) this.finish(pending, { outcome: `not sent: ${error.message}`, verdict: "lost" })
      })
    })
  }
}

/** A pool of client endpoints sending to the server's CoAP port (read at each send: it changes when the server is restarted). */
export class CoapSender {
  private current: Endpoint | undefined
  private readonly retired: Array<Endpoint> = []
  private nextToken = 0
  /** Answers matching no request (to a mutated datagram whose id or token changed, or late). */
  readonly strays = new Map<string, number>()

  constructor(private readonly host: string, private readonly port: () => number) {}

  private endpoint(): Endpoint {
    if (this.current === undefined || this.current.used >= IDS_PER_SOCKET) {
      if (this.current !== undefined) this.retired.push(this.current)
      const next = new Endpoint(this.host, this.port, (what) => this.strays.set(what, (this.strays.get(what) ?? 0) + 1))
      this.current = next
      next.bind()
      for (const old of this.retired.splice(0)) {
        if (old.busy) this.retired.push(old)
        else old.socket.close()
      }
    }
    return this.current
  }

  /** Sends one input with a fresh message id and token (over a mutated datagram's own, which are meaningless). */
  async send(input: CoapInput, timeoutMs: number): Promise<Answer> {
    const endpoint = this.endpoint()
    const messageId = endpoint.used++ & 0xffff
    const token = Buffer.alloc(4)
    token.writeUInt32BE(this.nextToken++ >>> 0)
    let datagram = input.datagram(messageId, token)
    if (input.marker === "odd" && datagram.length >= 4) {
      datagram = Buffer.from(datagram)
      datagram.writeUInt16BE(messageId, 2)
    }
    return endpoint.send(datagram, messageId, token, timeoutMs)
  }

  close(): void {
    for (const endpoint of [...this.retired, ...(this.current === undefined ? [] : [this.current])]) endpoint.socket.close()
    this.retired.length = 0
    this.current = undefined
  }
}
