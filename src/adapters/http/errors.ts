import type { Context } from "hono"
import type { ContentfulStatusCode } from "hono/utils/http-status"
import { type DomainError, notFoundMessage } from "../../domain/errors.ts"

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

export const sendError = (c: Context, e: DomainError): Response => {
  const { status, body, headers } = httpError(e)
  return c.json(body, status, headers)
}

export const sendStatus = (c: Context, status: ContentfulStatusCode, code: string, message: string, headers?: Record<string, string>) =>
  c.json(errorBody(status, code, message), status, headers)
