import { type DomainError, notFoundMessage } from "../../domain/errors.ts"
import { printable } from "../logLine.ts"

/** What the CoAP adapter answers: a response code, a JSON payload and the options that go with the code. */
export interface CoapReply {
  /** `class.detail`, e.g. `2.01`, `4.00` (RFC 7252 §5.9). */
  readonly code: string
  /** JSON text (Content-Format application/json). */
  readonly payload: string
  /** Seconds before retrying: Max-Age on 4.29 and 5.03 (RFC 7252 §5.9.3.4, RFC 8516). */
  readonly maxAge?: number
  /** The largest request payload accepted: Size1 on 4.13 (RFC 7252 §5.9.2.9, RFC 7959 §4). */
  readonly size1?: number
  /** The Block1 option acknowledging an upload block (RFC 7959 §2.3): on 2.31 and the final response. */
  readonly block1?: Uint8Array
  /** Why the request was refused (the error message), for the log; not sent. */
  readonly reason?: string
}

/** The REST error body with the CoAP code as status: `{"error": {"status": "4.00", "code", "message", "field"?}}`. */
export const errorReply = (code: string, name: string, message: string, extra: { field?: string; maxAge?: number; size1?: number } = {}): CoapReply => {
  const error = extra.field === undefined ? { status: code, code: name, message } : { status: code, code: name, message, field: extra.field }
  return {
    code,
    payload: JSON.stringify({ error }),
    reason: message,
    ...(extra.maxAge === undefined ? {} : { maxAge: extra.maxAge }),
    ...(extra.size1 === undefined ? {} : { size1: extra.size1 })
  }
}

/** Domain error → CoAP response code, payload and options: the one table for CoAP. */
export const coapError = (e: DomainError): CoapReply => {
  switch (e._tag) {
    case "InvalidInput":
      return errorReply("4.00", "invalid_request", e.message, { field: e.field })
    case "Unauthorized":
      return errorReply("4.01", "unauthorized", e.message)
    case "Forbidden":
      return errorReply("4.03", "forbidden", e.message)
    case "NotFound":
      return errorReply("4.04", "not_found", notFoundMessage(e))
    case "Conflict":
      // RFC 8132 §3.2
      return errorReply("4.09", "conflict", e.message)
    case "PayloadTooLarge":
      return errorReply("4.13", "payload_too_large", `payload: larger than ${e.limit} bytes`, { size1: e.limit })
    case "UnsupportedMediaType":
      return errorReply("4.15", "unsupported_content_format", `Content-Format ${e.contentType} is not supported; send application/json (50)`)
    case "RateLimited":
      // RFC 8516
      return errorReply("4.29", "rate_limited", e.message, { maxAge: e.retryAfterSeconds })
    case "Unavailable":
      return errorReply("5.03", "unavailable", e.message, { maxAge: e.retryAfterSeconds })
  }
}

/** 4.05: the path exists but takes only POST. */
export const methodNotAllowed = (method: string, path: string): CoapReply =>
  errorReply("4.05", "method_not_allowed", `${method} ${path}: only POST is allowed`)

/** 4.02 (RFC 7959 §2.4): Block2 NUM > 0, but every reply is a single message. */
export const badBlock2 = (): CoapReply =>
  errorReply("4.02", "bad_option", "Block2: the response has no such block; repeat the request without Block2")

/** 4.02 (RFC 7252 §5.4.1): a critical option this server does not understand. */
export const badOption = (option: number): CoapReply =>
  errorReply("4.02", "bad_option", `option ${option}: critical, and not understood by this server (RFC 7252 §5.4.1); send the request without it`)

/** 5.05 (RFC 7252 §5.7.2): Proxy-Uri or Proxy-Scheme, but this server is no forward-proxy. */
export const proxyingNotSupported = (): CoapReply =>
  errorReply("5.05", "proxying_not_supported", "this server is not a forward-proxy; send the request to it without Proxy-Uri or Proxy-Scheme")

/** 5.00: a defect or a store failure, logged once where it happened. */
export const internalError = (): CoapReply =>
  errorReply("5.00", "internal", "the server failed to answer this request; it has been logged")

/**
 * The warning logged once for a refused request (every 4.xx and 5.xx but 5.00, which is
 * logged as an error where it happens): `coap POST /events from 127.0.0.1:5683 refused 4.01: …`.
 * `request` names the method, path and peer. undefined when the reply is no refusal.
 */
export const refusalLine = (request: string, reply: CoapReply): string | undefined => {
  const refused = (reply.code.startsWith("4.") || reply.code.startsWith("5.")) && reply.code !== "5.00"
  return refused ? printable(`coap ${request} refused ${reply.code}: ${reply.reason ?? "no reason given"}`) : undefined
}
