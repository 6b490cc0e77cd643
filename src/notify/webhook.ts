import { Effect } from "effect"
import { DeliveryFailure } from "./retry.ts"

/** A rendered webhook call. */
export interface WebhookRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

export type Fetch = typeof globalThis.fetch

/** `application/json` when the body is JSON, else plain text. */
export const contentTypeOf = (body: string): string => {
  try {
    JSON.parse(body)
    return "application/json"
  } catch {
    return "text/plain; charset=utf-8"
  }
}

/** The request headers, or why they cannot be sent (a malformed name or value is not worth retrying). */
export const webhookHeaders = (request: WebhookRequest): Headers | DeliveryFailure => {
  try {
    const headers = new Headers(request.headers)
    if (!headers.has("content-type")) headers.set("content-type", contentTypeOf(request.body))
    if (!headers.has("user-agent")) headers.set("user-agent", "Voltaic-Notifier")
    return headers
  } catch (error) {
    return new DeliveryFailure({ message: `invalid webhookHeaders: ${describe(error)}`, retryable: false })
  }
}

/** The URL to post to, or why it cannot be used. */
export const webhookUrl = (url: string): URL | DeliveryFailure => {
  const parsed = URL.canParse(url) ? new URL(url) : undefined
  if (parsed === undefined || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
    return new DeliveryFailure({ message: "webhookUrl is not an http(s) URL", retryable: false })
  }
  return parsed
}

/** The URL and headers of a call, or why it cannot be made (attempting it would not help). */
export const prepareWebhook = (request: WebhookRequest): { readonly url: URL; readonly headers: Headers } | DeliveryFailure => {
  const url = webhookUrl(request.url)
  if (url instanceof DeliveryFailure) return url
  const headers = webhookHeaders(request)
  if (headers instanceof DeliveryFailure) return headers
  return { url, headers }
}

/** A network error's message with its cause's code (fetch reports `fetch failed` and hides `ECONNREFUSED` in `cause`). */
const describe = (error: unknown): string => {
  if (!(error instanceof Error)) return String(error)
  const cause: unknown = error.cause
  if (cause instanceof Error) {
    const code = "code" in cause && typeof cause.code === "string" ? cause.code : cause.message
    return `${error.message}: ${code}`
  }
  return error.message
}

/** The first bytes of an error answer's body, to say why the receiver refused; the rest is discarded. */
const bodySnippet = async (response: Response, limit = 200): Promise<string> => {
  if (response.body === null) return ""
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let text = ""
  try {
    while (text.length < limit) {
      const chunk = await reader.read()
      if (chunk.done) break
      text += decoder.decode(chunk.value, { stream: true })
    }
  } finally {
    await reader.cancel().catch(() => undefined)
  }
  return text.slice(0, limit).trim()
}

/** 429 and 5xx may pass on a later attempt (RFC 9110 §15.6, RFC 6585 §4); other 4xx will not. */
const isRetryableStatus = (status: number) => status === 429 || status >= 500

/**
 * One POST. Succeeds with the 2xx status; fails with a {@link DeliveryFailure}
 * otherwise. Redirects are not followed: a 301/302 would turn the POST into a
 * GET, and a receiver should be configured with its final URL.
 */
export const postOnce = (fetch: Fetch, url: URL, headers: Headers, body: string): Effect.Effect<number, DeliveryFailure> =>
  Effect.tryPromise({
    try: async (signal) => {
      const response = await fetch(url, { method: "POST", headers, body, signal, redirect: "manual" })
      if (response.ok) {
        await response.body?.cancel().catch(() => undefined)
        return { status: response.status, snippet: "" }
      }
      return { status: response.status, snippet: await bodySnippet(response) }
    },
    catch: (error) => new DeliveryFailure({ message: describe(error), retryable: true })
  }).pipe(
    Effect.flatMap(({ status, snippet }) => {
      if (status >= 200 && status < 300) return Effect.succeed(status)
      const reason = status >= 300 && status < 400 ? "redirect not followed" : snippet
      return Effect.fail(
        new DeliveryFailure({
          message: reason === "" ? `HTTP ${status}` : `HTTP ${status}: ${reason}`,
          retryable: isRetryableStatus(status),
          statusCode: status
        })
      )
    })
  )
