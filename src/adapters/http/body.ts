import { Effect, Predicate } from "effect"
import type { Context } from "hono"
import { Readable } from "node:stream"
import { InvalidInput, PayloadTooLarge, UnsupportedMediaType } from "../../domain/errors.ts"
import { parseJson, screen } from "../../ingest/payload.ts"

/** Bodies beyond this are refused with 413 before they are parsed. */
export const JSON_BODY_LIMIT = 1024 * 1024

/**
 * `{"device.id": "x"}` → `{device: {id: "x"}}` (API-DECISIONS "Wire format": dotted keys
 * are accepted exactly like nested objects). Nested objects given both ways are merged.
 * Only the body's own keys are expanded, not those inside its values: an event's `data` (any
 * JSON value) keeps `{"temp.c": 21}` as the device sent it, as it does over MQTT.
 * Takes values that passed the payload policy (`screen`), which refuses keys with a part
 * named `__proto__`, `constructor` or `prototype`: walking into one would write onto
 * `Object.prototype`.
 */
export const expandDottedKeys = (value: unknown): unknown => {
  if (!Predicate.isObject(value) || Array.isArray(value) || value instanceof Blob) return value
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(value)) {
    const parts = key.split(".")
    let target = out
    for (const part of parts.slice(0, -1)) {
      const next = target[part]
      if (!Predicate.isObject(next) || Array.isArray(next)) target[part] = {}
      target = target[part] as Record<string, unknown>
    }
    const last = parts[parts.length - 1]
    const existing = target[last]
    target[last] = Predicate.isObject(existing) && !Array.isArray(existing) && Predicate.isObject(inner) && !Array.isArray(inner)
      ? { ...existing, ...inner }
      : inner
  }
  return out
}

const mediaType = (c: Context): string => (c.req.header("content-type") ?? "").split(";")[0].trim().toLowerCase()

/** A form-encoded or multipart body: its fields are strings (or files). */
export const isForm = (c: Context): boolean => {
  const type = mediaType(c)
  return type === "application/x-www-form-urlencoded" || type === "multipart/form-data"
}

/** `@hono/node-server` hands each request its Node `IncomingMessage` as `c.env.incoming`. */
const nodeIncoming = (env: unknown): Readable | undefined =>
  Predicate.isObject(env) && "incoming" in env && env.incoming instanceof Readable ? env.incoming : undefined

/**
 * The body as text. A GET's body is dropped from the fetch `Request` on Node (the Fetch
 * standard allows none), yet the interface gives `GET /commands` its parameters in the body,
 * so there it is read from the Node request itself. Deno.serve drops it before the handler
 * sees it: such a request is refused (400) rather than answered as if it had no parameters.
 */
const bodyText = (c: Context, limit: number) => {
  const bodiless = c.req.method === "GET" || c.req.method === "HEAD"
  const incoming = bodiless ? nodeIncoming(c.env) : undefined
  if (incoming === undefined) {
    return Effect.promise(() => c.req.text()).pipe(Effect.filterOrFail(
      // Deno.serve drops a GET's body (it is not in its Request at all): refused, not ignored.
      (text) => !(bodiless && text === "" && Number(c.req.header("content-length") ?? "0") > 0),
      () =>
        new InvalidInput({
          field: "body",
          message: "body: this server's runtime cannot read the body of a GET request; give the parameters in the query string"
        })
    ))
  }
  return Effect.tryPromise({
    try: async () => {
      const chunks: Array<Buffer> = []
      let size = 0
      for await (const chunk of incoming) {
        const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk))
        size += buffer.length
        if (size > limit) throw new PayloadTooLarge({ limit })
        chunks.push(buffer)
      }
      return Buffer.concat(chunks).toString("utf8")
    },
    catch: (e) => e instanceof PayloadTooLarge ? e : new InvalidInput({ field: "body", message: "body: could not be read" })
  })
}

/** Form fields under the payload policy, dotted keys expanded. */
const screened = (fields: Record<string, unknown>) => {
  const breach = screen(fields, "body")
  return breach === undefined ? Effect.succeed(expandDottedKeys(fields)) : Effect.fail(breach)
}

/**
 * Reads a request body as JSON, form-encoded or multipart (file parts stay `File`s) and
 * expands dotted keys. An empty body is `{}`.
 */
export const readBody = Effect.fnUntraced(function*(c: Context, limit: number = JSON_BODY_LIMIT) {
  const declared = Number(c.req.header("content-length") ?? "0")
  if (declared > limit) return yield* new PayloadTooLarge({ limit })
  const type = mediaType(c)
  if (type === "multipart/form-data") {
    const form = yield* Effect.tryPromise({
      try: () => c.req.formData(),
      catch: () => new InvalidInput({ field: "body", message: "body: malformed multipart/form-data" })
    })
    const fields: Record<string, unknown> = {}
    form.forEach((value, key) => {
      fields[key] = value
    })
    return yield* screened(fields)
  }
  const text = yield* bodyText(c, limit)
  if (Buffer.byteLength(text) > limit) return yield* new PayloadTooLarge({ limit })
  if (text.trim() === "") return {}
  if (type === "application/json" || type.endsWith("+json") || type === "") {
    if (type === "") return yield* new UnsupportedMediaType({ contentType: "(none)" })
    const parsed = parseJson(text, "body")
    return parsed instanceof InvalidInput ? yield* parsed : expandDottedKeys(parsed.value)
  }
  if (type === "application/x-www-form-urlencoded") {
    return yield* screened(Object.fromEntries(new URLSearchParams(text)))
  }
  return yield* new UnsupportedMediaType({ contentType: type })
})
