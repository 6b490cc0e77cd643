import { z } from "@hono/zod-openapi"
import { INSTANT_RULE, parseInstant } from "../../domain/instant.ts"

/**
 * Query parameter schemas. Query values arrive as strings; each schema states its rule
 * in the message so the 400 names the parameter and what it accepts.
 */
export const intParam = (min: number, max: number, fallback: number) =>
  z.string().optional().transform((value, ctx) => {
    if (value === undefined || value === "") return fallback
    const n = /^-?\d+$/.test(value) ? Number(value) : Number.NaN
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      ctx.addIssue({ code: "custom", message: `must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}` })
      return z.NEVER
    }
    return n
  }).openapi({ type: "integer", minimum: min, maximum: max, default: fallback })

export const instantParam = z.string().optional().transform((value, ctx) => {
  if (value === undefined || value === "") return undefined
  const ms = parseInstant(value)
  if (ms === undefined) {
    ctx.addIssue({ code: "custom", message: `${INSTANT_RULE}, got ${JSON.stringify(value)}` })
    return z.NEVER
  }
  return ms
}).openapi({ type: "string", description: "ISO-8601 date-time or integer epoch milliseconds", example: "2026-01-01T00:00:00Z" })

export const sortParam = z.string().optional().transform((value, ctx) => {
  if (value === undefined || value === "") return "DESC" as const
  const upper = value.toUpperCase()
  if (upper !== "ASC" && upper !== "DESC") {
    ctx.addIssue({ code: "custom", message: `must be ASC or DESC, got ${JSON.stringify(value)}` })
    return z.NEVER
  }
  return upper
}).openapi({ type: "string", enum: ["ASC", "DESC"], default: "DESC" })

export const booleanParam = z.string().optional().transform((value, ctx) => {
  if (value === undefined || value === "") return undefined
  if (value === "true" || value === "1") return true
  if (value === "false" || value === "0") return false
  ctx.addIssue({ code: "custom", message: `must be true or false, got ${JSON.stringify(value)}` })
  return z.NEVER
}).openapi({ type: "boolean" })

/** The shared list parameters; `order` is limited to the resource's columns. */
export const listParams = (orders: ReadonlyArray<string>, defaultOrder: string) => ({
  limit: intParam(1, 200, 20),
  page: intParam(0, 1_000_000, 0),
  sort: sortParam,
  order: z.string().optional().transform((value, ctx) => {
    if (value === undefined || value === "") return defaultOrder
    if (!orders.includes(value)) {
      ctx.addIssue({ code: "custom", message: `must be one of ${orders.join(", ")}, got ${JSON.stringify(value)}` })
      return z.NEVER
    }
    return value
  }).openapi({ type: "string", enum: [...orders], default: defaultOrder }),
  since: instantParam,
  until: instantParam
})

export const idParams = z.object({ id: z.string().min(1).max(200) })

/** An object reference in a body: `{id}`. */
export const refSchema = z.object({ id: z.string().min(1).max(200) })
