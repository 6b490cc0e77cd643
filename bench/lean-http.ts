/**
 * The sending side of an HTTP/1.1 client, and nothing more, for bench:ingest's command case
 * (`bench/commands-load.ts`): keep-alive TCP connections, one request at a time on each, a
 * request written as one string, and an answer read for its status line and its length alone.
 *
 * The command case measures a run from its send to its arrival at the device, both in the load's
 * process, so the load's own pauses count as the server's latency. With node:http (an Agent of 64
 * keep-alive sockets) that process ran a 9–15 ms scavenge every ~1.7 s at 1,000 requests/s, while
 * the MQTT senders' runs of the same case had none over 5 ms: each scavenge caught the 10–20 runs
 * in flight (what node:http kept alive across them was not traced; replacing it was the test).
 *
 * Answers are expected with `content-length` (Voltaic's JSON) or chunked; anything else fails
 * the connection's request. No TLS, no redirects, no retries: a case lasts seconds.
 *
 * An idle connection is not used once it has been idle for a second less than the timeout the
 * server announced (`keep-alive: timeout=5` from Node's http: it closes an idle connection then):
 * a request written as the server closes the connection is lost with it ("connection closed"),
 * and bench:ingest counts it as the server's error. The idle connections are used newest first,
 * so those beyond a burst's usual depth idle for seconds. (3 of 10,000 REST runs of one PGlite
 * case failed so, once; not seen in six runs after: this race is the likely cause, not a shown one.)
 */
import { createConnection, type Socket } from "node:net"

export interface LeanAnswer {
  readonly status: number
}

interface Waiting {
  readonly head: string
  readonly body: string
  readonly done: (answer: LeanAnswer | Error) => void
}

const HEADER_END = Buffer.from("\r\n\r\n")
/** Left unused from this long before the server's announced idle timeout. */
const KEEP_ALIVE_MARGIN_MS = 1_000
const CHUNKED_END = Buffer.from("0\r\n\r\n")

class Connection {
  private readonly socket: Socket
  private buffered: Buffer | undefined = undefined
  private current: Waiting | undefined = undefined
  broken = false
  /** When the last answer came (performance.now()). */
  idleSince = performance.now()
  /** How long the server keeps this connection open while idle, from its last answer's `keep-alive` header. */
  keepAliveMs = Number.POSITIVE_INFINITY

  constructor(host: string, port: number, private readonly onIdle: (c: Connection) => void, private readonly onBroken: (c: Connection) => void) {
    this.socket = createConnection({ host, port })
    this.socket.setNoDelay(true)
    this.socket.on("data", (chunk: Buffer) => this.read(chunk))
    this.socket.on("error", (error) => this.fail(error))
    this.socket.on("close", () => this.fail(new Error("connection closed")))
  }

  send(request: Waiting) {
    this.current = request
    this.socket.write(request.head + request.body)
  }

  close() {
    this.socket.destroy()
  }

  private fail(error: Error) {
    if (!this.broken) {
      this.broken = true
      this.onBroken(this)
    }
    const current = this.current
    this.current = undefined
    current?.done(error)
  }

  /** An answer is whole once its headers and its body (by length, or chunked to its last chunk) are in. */
  private read(chunk: Buffer) {
    const data = this.buffered === undefined ? chunk : Buffer.concat([this.buffered, chunk])
    const end = data.indexOf(HEADER_END)
    if (end < 0) {
      this.buffered = data
      return
    }
    const head = data.toString("latin1", 0, end)
    const status = Number(head.slice(9, 12))
    const keepAlive = /\r\nkeep-alive:[^\r]*timeout=(\d+)/i.exec(head)
    if (keepAlive !== null) this.keepAliveMs = Number(keepAlive[1]) * 1000
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head)
    let whole: number
    if (length !== null) whole = end + 4 + Number(length[1])
    else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      const last = data.indexOf(CHUNKED_END, end + 4)
      whole = last < 0 ? Number.POSITIVE_INFINITY : last + CHUNKED_END.length
    } else {
      this.socket.destroy(new Error(`answer without a length: ${head.split("\r\n")[0]}`))
      return
    }
    if (data.length < whole) {
      this.buffered = data
      return
    }
    this.buffered = data.length > whole ? data.subarray(whole) : undefined
    const current = this.current
    this.current = undefined
    this.idleSince = performance.now()
    current?.done({ status })
    this.onIdle(this)
  }
}

/** Up to `connections` keep-alive connections to `url`'s host; requests queue for the first one free. */
export class LeanHttpClient {
  private readonly idle: Array<Connection> = []
  /** Connections not broken: at most `connections`. */
  private readonly open = new Set<Connection>()
  private readonly queue: Array<Waiting> = []
  private readonly host: string
  private readonly port: number
  private readonly authority: string

  constructor(url: string, private readonly connections: number) {
    const { hostname, port, host } = new URL(url)
    this.host = hostname
    this.port = port === "" ? 80 : Number(port)
    this.authority = host
  }

  /** Sends `body` (JSON) to `path` with these extra header lines; calls `done` with the answer's status, or the error. */
  post(path: string, headers: string, body: string, done: (answer: LeanAnswer | Error) => void): void {
    const head = `POST ${path} HTTP/1.1\r\nhost: ${this.authority}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${headers}\r\n`
    const request: Waiting = { head, body, done }
    const free = this.take()
    if (free === undefined) this.queue.push(request)
    else free.send(request)
  }

  close(): void {
    for (const c of this.open) c.close()
  }

  private take(): Connection | undefined {
    for (;;) {
      const c = this.idle.pop()
      if (c === undefined) break
      if (c.broken) continue
      if (performance.now() - c.idleSince < c.keepAliveMs - KEEP_ALIVE_MARGIN_MS) return c
      c.close()
      this.open.delete(c)
    }
    if (this.open.size >= this.connections) return undefined
    const made = new Connection(this.host, this.port, (c) => this.freed(c), (c) => this.broke(c))
    this.open.add(made)
    return made
  }

  /** A connection lost: what waits for one goes on a new one. */
  private broke(c: Connection) {
    this.open.delete(c)
    const next = this.queue.length === 0 ? undefined : this.take()
    if (next !== undefined) next.send(this.queue.shift()!)
  }

  private freed(c: Connection) {
    const next = this.queue.shift()
    if (next !== undefined) c.send(next)
    else this.idle.push(c)
  }
}
