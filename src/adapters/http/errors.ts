import { Predicate } from "effect"
import type { Context } from "hono"
import type { ContentfulStatusCode } from "hono/utils/http-status"
import { type DomainError, notFoundMessage } from "../../domain/errors.ts"
import { printable } from "../logLine.ts"

export interface ErrorBody {
  error: { status: number; code: string; message: string; field?: string }
}

export const errorBody = (status: number, code: string, message: string, field?: string): ErrorBody => ({
  error: field === undefined ? { status, code, message } : { status, code, message, field }
})

/** Domain error → HTTP status, code, message and headers: the one table for REST. */
export const httpError = (e: DomainError): { status: ContentfulStatusCode; body: ErrorBody; headers?: Record<string, string> } => {
  switch (e._tag) {
    case "InvalidInput":
      return { status: 400, body: errorBody(400, "invalid_request", e.message, e.field) }
    case "Unauthorized":
      return { status: 401, body: errorBody(401, "unauthorized", e.message), headers: { "WWW-Authenticate": "Bearer" } }
    case "Forbidden":
      return { status: 403, body: errorBody(403, "forbidden", e.message) }
    case "NotFound":
      return { status: 404, body: errorBody(404, "not_found", notFoundMessage(e)) }
    case "Conflict":
      return { status: 409, body: errorBody(409, "conflict", e.message) }
    case "PayloadTooLarge":
      return { status: 413, body: errorBody(413, "payload_too_large", `body: larger than ${e.limit} bytes`) }
    case "UnsupportedMediaType":
      return {
        status: 415,
        body: errorBody(415, "unsupported_media_type", `Content-Type ${e.contentType} is not supported; send application/json`)
      }
    case "RateLimited":
      return {
        status: 429,
        body: errorBody(429, "rate_limited", e.message),
        headers: { "Retry-After": String(e.retryAfterSeconds) }
      }
    case "Unavailable":
      return {
        status: 503,
        body: errorBody(503, "unavailable", e.message),
        headers: { "Retry-After": String(e.retryAfterSeconds) }
      }
  }
}

/** A refusal: the client's request is answered 4xx (5xx are the server's failures, logged where they happen). */
export const isRefusal = (status: number): boolean => status >= 400 && status < 500

/**
 * The refusal each request was answered with here, so that logging it need not read the
 * response body back. Keyed by the request's context: gone with it.
 */
const refusals = new WeakMap<Context, { readonly status: number; readonly code: string; readonly message: string }>()

const answer = (c: Context, status: ContentfulStatusCode, body: ErrorBody, headers: Record<string, string> | undefined): Response => {
  if (isRefusal(status)) refusals.set(c, body.error)
  return c.json(body, status, headers)
}

export const sendError = (c: Context, e: DomainError): Response => {
  const { status, body, headers } = httpError(e)
  return answer(c, status, body, headers)
}

export const sendStatus = (c: Context, status: ContentfulStatusCode, code: string, message: string, headers?: Record<string, string>) =>
  answer(c, status, errorBody(status, code, message), headers)

/**
 * The line a refused request is logged with, from its final response:
 * `http POST /v1/events from 10.0.0.7 refused 400 invalid_request: name: is required`.
 * Method, path, peer (where the runtime exposes it), status, code and message; never the query
 * string (which may carry `access_token`), a header or the body. A refusal answered by
 * `sendError`/`sendStatus` is known; any other (a handler's own response, such as the OAuth
 * errors of `POST /oauth/token`) is read back from its JSON body.
 */
export const refusalLine = async (c: Context): Promise<string> => {
  const res = c.res
  const known = refusals.get(c)
  const { code, message } = known !== undefined && known.status === res.status ? known : await refusalOfBody(res)
  const peer = peerAddress(c)
  return printable(`http ${c.req.method} ${c.req.path}${peer === undefined ? "" : ` from ${peer}`} refused ${res.status} ${code}: ${message}`)
}

/** `{"error": {"code", "message"}}`, or an OAuth `{"error", "error_description"}` (RFC 6749 §5.2). */
const refusalOfBody = async (res: Response): Promise<{ code: string; message: string }> => {
  let body: unknown
  try {
    body = JSON.parse(await res.clone().text())
  } catch {
    return { code: "refused", message: "(no JSON error body)" }
  }
  if (!Predicate.hasProperty(body, "error")) return { code: "refused", message: "(no JSON error body)" }
  const error: unknown = body.error
  if (typeof error === "string") {
    const description: unknown = Predicate.hasProperty(body, "error_description") ? body.error_description : undefined
    return { code: error, message: typeof description === "string" ? description : "" }
  }
  const code: unknown = Predicate.hasProperty(error, "code") ? error.code : undefined
  const message: unknown = Predicate.hasProperty(error, "message") ? error.message : undefined
  return { code: typeof code === "string" ? code : "refused", message: typeof message === "string" ? message : "" }
}

/**
 * The connection's address where the runtime exposes it: `@hono/node-server` hands over the Node
 * request as `c.env.incoming`; the Deno listener passes `c.env.remoteAddress`.
 */
export const peerAddress = (c: Context): string | undefined => {
  const env: unknown = c.env
  if (Predicate.hasProperty(env, "remoteAddress") && typeof env.remoteAddress === "string") return env.remoteAddress
  if (!Predicate.hasProperty(env, "incoming")) return undefined
  const incoming: unknown = env.incoming
  if (!Predicate.hasProperty(incoming, "socket")) return undefined
  const socket: unknown = incoming.socket
  return Predicate.hasProperty(socket, "remoteAddress") && typeof socket.remoteAddress === "string" ? socket.remoteAddress : undefined
}
