import { Effect, Logger } from "effect"
import { createServer, type IncomingHttpHeaders, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { SMTPServer, type SMTPServerOptions } from "smtp-server"
import type { NotificationRequest, NotificationTemplate, Recipient, RetryPolicy } from "../../src/notify/Notifier.ts"

const portOf = (address: string | AddressInfo | null): number => {
  if (address === null || typeof address === "string") throw new Error("not listening on TCP")
  return address.port
}

export interface ReceivedRequest {
  readonly method: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** What the receiver does with one request: answer with a status, or never answer. */
export type Reply = number | "hang"

/**
 * A webhook receiver on 127.0.0.1, port 0. It answers the n-th request with
 * `replies[n]` (the last reply repeats) and records every request.
 */
export const webhookReceiver = async (replies: ReadonlyArray<Reply>) => {
  const received: Array<ReceivedRequest> = []
  const server: Server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const reply = replies[Math.min(received.length, replies.length - 1)] ?? 200
      received.push({ method: req.method ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") })
      if (reply === "hang") return
      res.writeHead(reply, { "content-type": "text/plain" })
      res.end(reply >= 400 ? `refused with ${reply}` : "ok")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const url = `http://127.0.0.1:${portOf(server.address())}/hooks/alerts?token=t0ken`
  return {
    url,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** A URL nothing listens on: a port that was just free, now closed again. */
export const unreachableUrl = async (): Promise<string> => {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = portOf(server.address())
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return `http://127.0.0.1:${port}/hooks`
}

export interface ReceivedMail {
  readonly from: string
  readonly recipients: ReadonlyArray<string>
  readonly raw: string
  readonly user: string | undefined
}

/** An SMTP sink on 127.0.0.1, port 0, recording every message; `options` add hooks (e.g. refusals). */
export const smtpSink = async (options: Partial<SMTPServerOptions> = {}) => {
  const messages: Array<ReceivedMail> = []
  const server = new SMTPServer({
    authOptional: true,
    allowInsecureAuth: true,
    disabledCommands: ["STARTTLS"],
    logger: false,
    onAuth: (auth, _session, callback) => {
      if (auth.username === "alice" && auth.password === "s3cret") callback(null, { user: auth.username })
      else callback(new Error("invalid credentials"))
    },
    onData: (stream, session, callback) => {
      const chunks: Array<Buffer> = []
      stream.on("data", (chunk: Buffer) => chunks.push(chunk))
      stream.on("end", () => {
        messages.push({
          from: session.envelope.mailFrom === false ? "" : session.envelope.mailFrom.address,
          recipients: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString("utf8"),
          user: typeof session.user === "string" ? session.user : undefined
        })
        callback()
      })
    },
    ...options
  })
  const listening = server.listen(0, "127.0.0.1")
  await new Promise<void>((resolve) => listening.once("listening", () => resolve()))
  return {
    port: portOf(listening.address()),
    messages,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

/** An SMTP reply error, as smtp-server sends it. */
export const smtpError = (responseCode: number, message: string) => Object.assign(new Error(message), { responseCode })

/** The decoded headers and text body of a simple (single-part, 7bit) message. */
export const parseMail = (raw: string) => {
  const split = raw.indexOf("\r\n\r\n")
  const head = raw.slice(0, split).replace(/\r\n[ \t]+/g, " ")
  const header = (name: string) => head.split("\r\n").find((line) => line.toLowerCase().startsWith(`${name.toLowerCase()}:`))?.slice(name.length + 1).trim()
  return { header, body: raw.slice(split + 4).replace(/\r\n/g, "\n").trimEnd() }
}

/** An offline alert of a named device, ready for the notifier. */
export const alertRequest = (template: NotificationTemplate | null, recipients: ReadonlyArray<Recipient> = []): NotificationRequest => ({
  alert: { id: "alr_1", firstSeenAt: 1_700_000_000_000 },
  rule: { id: "rul_1", name: "Boiler offline", severity: "high", type: "offline" },
  device: { id: "dev_1", name: "Boiler" },
  event: { name: "heartbeat", data: { battery: 12, flags: ["low"] } },
  template,
  recipients
})

/** Millisecond backoff so retry tests take milliseconds; the cap on attempts is the production one. */
export const fastRetry: Partial<RetryPolicy> = { baseDelay: "5 millis", maxDelay: "20 millis", jitter: false, attemptTimeout: "2 seconds" }

/** Runs a notifier effect with logging silenced, or captured into `logs` when given. */
export const run = <A, E>(effect: Effect.Effect<A, E>, logs?: Array<{ level: string; message: unknown }>): Promise<A> =>
  Effect.runPromise(
    effect.pipe(Effect.provide(Logger.layer(logs === undefined ? [] : [Logger.make(({ logLevel, message }) => logs.push({ level: logLevel, message }))])))
  )
