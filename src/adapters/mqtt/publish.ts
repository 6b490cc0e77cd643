import { Effect } from "effect"
import type { z } from "@hono/zod-openapi"
import type { Principal } from "../../auth/Principal.ts"
import { parsePublishTopic } from "../../bus/topics.ts"
import { InvalidInput } from "../../domain/errors.ts"
import type { IngestError, IngestService } from "../../ingest/Ingest.ts"
import { parseJson } from "../../ingest/payload.ts"
import { commandRunInput, type DeviceRef, eventInput, locationInput } from "../../ingest/schemas.ts"
import { parseInput } from "../validation.ts"

/**
 * A device or application publish as the ingest service takes it: the topic names the kind
 * (and usually the device), the JSON payload the rest (API-DECISIONS "MQTT").
 */
export type IngestRequest =
  | { readonly kind: "event"; readonly device: DeviceRef | undefined; readonly input: z.output<typeof eventInput> }
  | { readonly kind: "location"; readonly device: DeviceRef | undefined; readonly input: z.output<typeof locationInput> }
  | { readonly kind: "command"; readonly device: DeviceRef | undefined; readonly input: z.output<typeof commandRunInput> }


/**
 * `{"data", "timestamp"?}` on a device's event topic (`{"data"?}` on a command topic);
 * any other JSON value is the data itself.
 */
const wrapped = (value: unknown, keys: ReadonlyArray<string>): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value) && Object.hasOwn(value, "data") &&
  Object.keys(value).every((key) => keys.includes(key))

const validate = <S extends z.ZodType>(schema: S, value: unknown): z.output<S> | InvalidInput => parseInput(schema, value, "payload")

/** The latest instant `eventInput` takes as epoch milliseconds. */
const MAX_INSTANT = 8_640_000_000_000_000

/**
 * The common publish, an event on a device's topic with an epoch-millisecond timestamp or
 * none, checked by hand as `eventInput` would; anything else (undefined) goes through zod.
 */
const plainEvent = (deviceId: string, name: string, fields: Record<string, unknown>): IngestRequest | undefined => {
  const timestamp = fields.timestamp
  if (name.length > 200) return undefined
  if (timestamp !== undefined && !(Number.isInteger(timestamp) && typeof timestamp === "number" && timestamp >= 0 && timestamp <= MAX_INSTANT)) {
    return undefined
  }
  return { kind: "event", device: { id: deviceId }, input: { name, data: fields.data, timestamp } }
}

/**
 * What a publish asks for, or why it cannot be taken: an unknown topic or a payload that breaks a
 * rule (the payload policy among them). The topic is already well-formed UTF-8 without NUL:
 * `guardConnection` closes a connection sending any other [MQTT-1.5.3-1, MQTT-1.5.3-2].
 */
export const decode = (topic: string, payload: Uint8Array | string): IngestRequest | InvalidInput => {
  const target = parsePublishTopic(topic)
  if (target === undefined) {
    return new InvalidInput({ field: "topic", message: `topic: ${topic} is not a topic devices publish to` })
  }
  const parsed = parseJson(payload, "payload")
  if (parsed instanceof InvalidInput) return parsed
  const value = parsed.value
  switch (target.kind) {
    case "event": {
      if (target.deviceId === undefined) {
        const input = validate(eventInput, value)
        return input instanceof InvalidInput ? input : { kind: "event", device: input.device, input }
      }
      const fields = wrapped(value, ["data", "timestamp"]) ? value : { data: value }
      const plain = plainEvent(target.deviceId, target.name, fields)
      if (plain !== undefined) return plain
      const input = validate(eventInput, { data: fields.data, timestamp: fields.timestamp, name: target.name })
      return input instanceof InvalidInput ? input : { kind: "event", device: { id: target.deviceId }, input }
    }
    case "location": {
      const input = validate(locationInput, value)
      if (input instanceof InvalidInput) return input
      return { kind: "location", device: target.deviceId === undefined ? input.device : { id: target.deviceId }, input }
    }
    case "command": {
      if (target.deviceId === undefined) {
        const input = validate(commandRunInput, value)
        return input instanceof InvalidInput ? input : { kind: "command", device: input.device, input }
      }
      const data = wrapped(value, ["data"]) ? value.data : value
      const input = validate(commandRunInput, { slug: target.slug, data })
      return input instanceof InvalidInput ? input : { kind: "command", device: { id: target.deviceId }, input }
    }
  }
}

/** Hands a decoded publish to the ingest service; resolves once the row is committed. */
export const ingestPublish = (
  ingest: IngestService,
  principal: Principal,
  request: IngestRequest
): Effect.Effect<void, IngestError> => {
  switch (request.kind) {
    case "event":
      return Effect.asVoid(ingest.event({ principal, protocol: "mqtt", device: request.device, payload: request.input }))
    case "location":
      return Effect.asVoid(ingest.location({ principal, protocol: "mqtt", device: request.device, payload: request.input }))
    case "command":
      return Effect.asVoid(ingest.runCommand({ principal, protocol: "mqtt", device: request.device, payload: request.input }))
  }
}
