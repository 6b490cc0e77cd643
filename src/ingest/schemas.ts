import { z } from "@hono/zod-openapi"
import { isTopicLevel } from "../bus/topics.ts"
import { INSTANT_RULE, parseInstant } from "../domain/instant.ts"

/** Shapes shared by every protocol: REST bodies, MQTT payloads and CoAP payloads. */

export const deviceRefSchema = z.object({
  id: z.string().min(1).max(200).optional(),
  customId: z.string().min(1).max(200).optional()
}).openapi("DeviceRef")

const instant = z.unknown().transform((value, ctx) => {
  const ms = parseInstant(value)
  if (ms === undefined) {
    ctx.addIssue({ code: "custom", message: `${INSTANT_RULE}, got ${JSON.stringify(value) ?? String(value)}` })
    return z.NEVER
  }
  return ms
}).openapi({
  anyOf: [{ type: "integer", minimum: 0 }, { type: "string", format: "date-time" }],
  description: "epoch milliseconds (a number or a string of digits) or ISO-8601; defaults to the time of receipt"
})

export const eventName = z.string().min(1).max(200).refine(isTopicLevel, {
  message: "must not contain '/', '+' or '#' (it is an MQTT topic level)"
})

export const eventInput = z.object({
  name: eventName,
  data: z.unknown().optional(),
  timestamp: instant.optional(),
  device: deviceRefSchema.optional()
})

const coordinate = (min: number, max: number) =>
  z.union([z.number(), z.string().regex(/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/, { message: "must be a number" }).transform(Number)])
    .pipe(z.number().min(min, { message: `must be from ${min} to ${max}` }).max(max, { message: `must be from ${min} to ${max}` }))
    .openapi({ type: "number" })

export const locationInput = z.object({
  latitude: coordinate(-90, 90),
  longitude: coordinate(-180, 180),
  altitude: coordinate(-100_000, 1_000_000).optional(),
  timestamp: instant.optional(),
  device: deviceRefSchema.optional()
})

export const commandRunInput = z.object({
  slug: z.string().min(1).max(200).optional(),
  id: z.string().min(1).max(200).optional(),
  data: z.unknown().optional(),
  device: deviceRefSchema.optional()
})

export type EventInput = z.output<typeof eventInput>
export type LocationInput = z.output<typeof locationInput>
export type CommandRunInput = z.output<typeof commandRunInput>
export type DeviceRef = z.output<typeof deviceRefSchema>

/** A command's slug: its name in lower-case kebab form. */
export const slugify = (name: string): string =>
  name.normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "command"

/** Event data is stored as JSON; beyond this it is refused (413 / 4.13). */
export const MAX_EVENT_DATA_BYTES = 256 * 1024

/** Files attached to events (multipart `file` part). */
export const MAX_EVENT_FILE_BYTES = 10 * 1024 * 1024
