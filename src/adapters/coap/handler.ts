import type { z } from "@hono/zod-openapi"
import { Cause, Effect, Predicate } from "effect"
import { Auth } from "../../auth/Auth.ts"
import type { Principal } from "../../auth/Principal.ts"
import { InvalidInput, NotFound, PayloadTooLarge, Unauthorized, UnsupportedMediaType } from "../../domain/errors.ts"
import { type EventJson, Ingest, type IngestError } from "../../ingest/Ingest.ts"
import { parseJson } from "../../ingest/payload.ts"
import { eventInput, locationInput, MAX_EVENT_DATA_BYTES } from "../../ingest/schemas.ts"
import { isConnectionLoss, storeLost } from "../../store/Sql.ts"
import { expandDottedKeys } from "../http/body.ts"
import { parseInput } from "../validation.ts"
import { coapError, type CoapReply, internalError, methodNotAllowed } from "./errors.ts"

/**
 * Request payloads beyond this are refused with 4.13 (Size1 = this): the event data limit
 * (`MAX_EVENT_DATA_BYTES`, as over REST and MQTT) plus room for `accessToken`, `name` and
 * `timestamp`. One UDP datagram carries at most ~64 KiB, so a payload beyond that arrives
 * block-wise (RFC 7959 Block1): `makeTransfers` reassembles it and refuses the transfer as
 * soon as a block would reach past this limit.
 */
export const MAX_COAP_PAYLOAD_BYTES = MAX_EVENT_DATA_BYTES + 16 * 1024

/**
 * Replies fit one message (RFC 7252 §4.6; the coap package would split 1024 bytes and more
 * with Block2, and a later block is fetched by repeating the POST). A 2.01 whose event JSON
 * does not fit leaves out `data`, which the device just sent.
 */
export const MAX_REPLY_BYTES = 1023

/** A CoAP request as the adapter reads it: what `fromIncoming` takes from the coap package. */
export interface CoapRequest {
  /** `POST`, `GET`, … or the raw code (`0.08`) of a method CoAP does not name. */
  readonly method: string
  /** `/events`: the Uri-Path options joined, without the query. */
  readonly path: string
  /** The Content-Format option: a media type, a number the coap package does not know, or absent. */
  readonly contentFormat: string | number | undefined
  readonly payload: Uint8Array
}

type Body = { readonly [key: PropertyKey]: unknown }

type Route = (principal: Principal, body: Body) => Effect.Effect<CoapReply, InvalidInput | IngestError, Ingest>

const validate = <S extends z.ZodType>(schema: S, value: unknown): Effect.Effect<z.output<S>, InvalidInput> => {
  const result = parseInput(schema, value, "body")
  return result instanceof InvalidInput ? Effect.fail(result) : Effect.succeed(result)
}

const created = (json: unknown): CoapReply => ({ code: "2.01", payload: JSON.stringify(json) })

const eventReply = (event: EventJson): CoapReply => {
  const full = created(event)
  if (Buffer.byteLength(full.payload) <= MAX_REPLY_BYTES) return full
  return created({ id: event.id, name: event.name, timestamp: event.timestamp, device: event.device })
}

/** `POST /events` and `POST /locations` (API-DECISIONS "CoAP"); the payload minus `accessToken` is the REST body. */
const routes: Record<string, Route> = {
  "/events": Effect.fnUntraced(function*(principal: Principal, body: Body) {
    const input = yield* validate(eventInput, body)
    const event = yield* Ingest.use((ingest) => ingest.event({ principal, protocol: "coap", device: input.device, payload: input }))
    return eventReply(event)
  }),
  "/locations": Effect.fnUntraced(function*(principal: Principal, body: Body) {
    const input = yield* validate(locationInput, body)
    return created(yield* Ingest.use((ingest) => ingest.location({ principal, protocol: "coap", device: input.device, payload: input })))
  })
}

const acceptedFormats = new Set<string | number | undefined>([undefined, "application/json", "text/plain"])

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The payload as a JSON object with dotted keys expanded (API-DECISIONS "Wire format"). */
const jsonObject = Effect.fnUntraced(function*(payload: Uint8Array) {
  if (payload.byteLength > MAX_COAP_PAYLOAD_BYTES) return yield* new PayloadTooLarge({ limit: MAX_COAP_PAYLOAD_BYTES })
  const text = yield* Effect.try({
    try: () => utf8.decode(payload),
    catch: () => new InvalidInput({ field: "body", message: "body: must be UTF-8 text" })
  })
  if (text.trim() === "") {
    return yield* new InvalidInput({ field: "body", message: "body: is empty; send a JSON object with accessToken" })
  }
  const parsed = parseJson(text, "body")
  if (parsed instanceof InvalidInput) return yield* parsed
  const body = expandDottedKeys(parsed.value)
  if (!Predicate.isObject(body)) return yield* new InvalidInput({ field: "body", message: "body: must be a JSON object" })
  return body
})

/** CoAP authentication (spec "Authentication" 6): the device secret key is the payload's `accessToken`. */
const principalOf = Effect.fnUntraced(function*(body: Body) {
  const token = body.accessToken
  if (token === undefined || token === null || token === "") {
    return yield* new Unauthorized({ message: "not authenticated: send the device secret key as accessToken" })
  }
  if (typeof token !== "string") {
    return yield* new InvalidInput({ field: "accessToken", message: "accessToken: must be a string" })
  }
  return yield* Auth.use((auth) => auth.authenticate(token))
})

const serve = Effect.fnUntraced(function*(request: CoapRequest) {
  const route = Object.hasOwn(routes, request.path) ? routes[request.path] : undefined
  if (route === undefined) return yield* new NotFound({ resource: "path", id: request.path })
  if (request.method !== "POST") return methodNotAllowed(request.method, request.path)
  if (!acceptedFormats.has(request.contentFormat)) {
    return yield* new UnsupportedMediaType({ contentType: String(request.contentFormat) })
  }
  const body = yield* jsonObject(request.payload)
  const principal = yield* principalOf(body)
  return yield* route(principal, body)
})

/**
 * One CoAP request → Envelope → Ingest → the reply: 2.01 with the stored event or location,
 * or the error table's code. Never fails: a store failure or a defect is logged once and
 * answered 5.00.
 */
export const handleCoap = (request: CoapRequest): Effect.Effect<CoapReply, never, Auth | Ingest> =>
  serve(request).pipe(
    Effect.catchCause((cause) => {
      const failure = cause.reasons.find(Cause.isFailReason)
      if (failure !== undefined && failure.error._tag !== "SqlError") return Effect.succeed(coapError(failure.error))
      if (failure !== undefined && failure.error._tag === "SqlError" && isConnectionLoss(failure.error)) return Effect.succeed(coapError(storeLost))
      return Effect.as(Effect.logError(`coap ${request.method} ${request.path} failed: ${Cause.pretty(cause)}`), internalError())
    })
  )
