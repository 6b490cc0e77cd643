import { Effect, Redacted, type Scope } from "effect"
import * as nodemailer from "nodemailer"
import { DeliveryFailure } from "./retry.ts"

/** A user who receives a space's alerts (the space's alert subscribers). */
export interface Recipient {
  readonly emailAddress: string
  readonly fullName?: string | null | undefined
}

/** A plain-text e-mail. */
export interface MailMessage {
  readonly from: string
  readonly to: ReadonlyArray<Recipient>
  readonly subject: string
  readonly text: string
}

export interface MailReceipt {
  /** Addresses the server refused while accepting the message for the others. */
  readonly rejected: ReadonlyArray<string>
}

/** Sends one message; the SMTP one in production, a fake in tests. */
export interface MailTransport {
  send(message: MailMessage): Effect.Effect<MailReceipt, DeliveryFailure>
}

/** Errors nodemailer raises before or without an SMTP reply that another attempt would not fix. */
const permanentErrorCodes = new Set(["EAUTH", "EENVELOPE", "EMESSAGE", "ECONFIG"])

const field = (value: unknown, name: string): unknown =>
  typeof value === "object" && value !== null && name in value ? Reflect.get(value, name) : undefined

/** RFC 5321 §4.2.1: 4yz replies are transient, 5yz permanent; no reply at all (connection trouble) is transient. */
const smtpFailure = (cause: unknown): DeliveryFailure => {
  const replyCode = field(cause, "responseCode")
  const code = field(cause, "code")
  const message = cause instanceof Error ? cause.message : String(cause)
  if (typeof replyCode === "number") {
    return new DeliveryFailure({ message, retryable: replyCode >= 400 && replyCode < 500, statusCode: replyCode })
  }
  return new DeliveryFailure({ message, retryable: !(typeof code === "string" && permanentErrorCodes.has(code)) })
}

const addressText = (address: string | { readonly address: string }) => (typeof address === "string" ? address : address.address)

/**
 * SMTP through nodemailer, from a URL such as `smtp://user:pass@host:587` or
 * `smtps://…:465` (nodemailer's URL options, e.g. `?tls.rejectUnauthorized=false`,
 * apply). The transport is closed with the scope.
 */
export const smtpTransport = (url: Redacted.Redacted<string>): Effect.Effect<MailTransport, never, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() =>
        nodemailer.createTransport({
          url: Redacted.value(url),
          // Fail an attempt on its own rather than leave it running after the retry gave up on it.
          connectionTimeout: 10_000,
          greetingTimeout: 10_000,
          socketTimeout: 20_000
        })
      ),
      (transporter) => Effect.sync(() => transporter.close())
    ),
    (transporter): MailTransport => ({
      send: (message) =>
        Effect.tryPromise({
          try: () =>
            transporter.sendMail({
              from: message.from,
              to: message.to.map((r) => ({ name: r.fullName ?? "", address: r.emailAddress })),
              subject: message.subject,
              text: message.text
            }),
          catch: smtpFailure
        }).pipe(Effect.map((info): MailReceipt => ({ rejected: info.rejected.map(addressText) })))
    })
  )
