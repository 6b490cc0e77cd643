import { z } from "@hono/zod-openapi"
import { Clock, Effect } from "effect"
import { InvalidInput, PayloadTooLarge, UnsupportedMediaType } from "../../../domain/errors.ts"
import { parseInterval, PERIODS, type Period } from "../../../energy/buckets.ts"
import { importReadings, MAX_IMPORT_ROWS, parseImportBody } from "../../../energy/import.ts"
import { energyPage, MAX_PAGE_POINTS, UNKNOWN_COUNTRY } from "../../../energy/query.ts"
import { ENERGY_KINDS, type EnergyKind, FLOWS, SOURCES } from "../../../energy/readings.ts"
import { MAX_PAGE_BUCKETS } from "../../../energy/request.ts"
import { Zone } from "../../../energy/zone.ts"
import { Sql } from "../../../store/Sql.ts"
import { booleanParam, instantParam, intParam } from "../params.ts"
import type { Api } from "../route.ts"

/** The largest bulk-import body: the application-wide request limit. */
const IMPORT_BODY_LIMIT = 16 * 1024 * 1024

const enumParam = <T extends string>(values: ReadonlyArray<T>, description: string) =>
  z.string().optional().transform((value, ctx): T | undefined => {
    if (value === undefined || value === "") return undefined
    const found = values.find((v) => v === value)
    if (found === undefined) {
      ctx.addIssue({ code: "custom", message: `must be one of ${values.join(", ")}; got ${JSON.stringify(value)}` })
      return z.NEVER
    }
    return found
  }).openapi({ type: "string", enum: [...values], description })

const intervalParam = z.string().optional().transform((value, ctx) => {
  if (value === undefined || value === "") return undefined
  const interval = parseInterval(value)
  if (typeof interval === "string") {
    ctx.addIssue({ code: "custom", message: interval })
    return z.NEVER
  }
  return interval
}).openapi({
  type: "string",
  default: "1 hour",
  example: "15 minutes",
  description: "A whole number, a space and a unit: minute, hour, day, week or month (singular or plural)."
})

const timezoneParam = z.string().optional().transform((value, ctx) => {
  if (value === undefined || value === "") return undefined
  if (Zone.of(value) === undefined) {
    ctx.addIssue({ code: "custom", message: `must be an IANA time zone name such as Europe/Dublin; got ${JSON.stringify(value)}` })
    return z.NEVER
  }
  return value
}).openapi({ type: "string", example: "Europe/Dublin", description: "IANA zone; default the space's (a device's space's), else UTC." })

const energyQuery = z.object({
  "space.id": z.string().min(1).max(200).optional().openapi({ description: "The devices of this space (their readings while in it)." }),
  "device.id": z.string().min(1).max(200).optional().openapi({ description: "One device. Neither: the whole organisation." }),
  since: instantParam,
  until: instantParam,
  interval: intervalParam,
  timezone: timezoneParam,
  current: enumParam<Period>(PERIODS, "The period holding now, in the time zone (instead of since/until)."),
  previous: enumParam<Period>(PERIODS, "The period before the current one."),
  breakdown: enumParam(["device", "country"] as const, "Also group by device (`devices`) or by the spaces' country (`countries`)."),
  source: enumParam(SOURCES, "Only this source; default all sources together."),
  flow: enumParam(FLOWS, "Default consumption."),
  limit: intParam(1, MAX_PAGE_BUCKETS, MAX_PAGE_BUCKETS).openapi({
    description: `Buckets per page (a breakdown page holds at most ${MAX_PAGE_POINTS} readings over all its series).`
  }),
  continuationToken: z.string().max(2_000).optional().openapi({ description: "From the previous page; it carries that query." }),
  rollups: booleanParam.openapi({ description: "false: answer from raw readings only (the same figures, slower; for checking)." })
})

const quantity = z.string().openapi({ description: "Decimal quantity", example: "1.25" })
const bucketStart = z.number().int().openapi({ description: "Bucket start, epoch milliseconds (UTC)" })
const readingSchemas: Record<EnergyKind, z.ZodType> = {
  electricity: z.object({ energy: quantity, timestamp: bucketStart }).openapi("EnergyReading"),
  gas: z.object({ gas: quantity, energy: quantity, timestamp: bucketStart }).openapi("GasReading"),
  water: z.object({ water: quantity, timestamp: bucketStart }).openapi("WaterReading")
}
const units: Record<EnergyKind, string> = { electricity: "kWh", gas: "m³", water: "m³" }

const envelope = (reading: z.ZodType, kind: EnergyKind) =>
  z.object({
    result: z.array(reading),
    continuationToken: z.string().nullable(),
    devices: z.record(z.string(), z.array(reading)).optional(),
    countries: z.record(z.string(), z.array(reading)).optional()
  }).openapi(`${kind[0].toUpperCase()}${kind.slice(1)}Envelope`)

const importRow = z.object({
  device: z.union([z.string(), z.object({ id: z.string() })]),
  timestamp: z.union([z.number().int(), z.string()]).openapi({ description: "epoch milliseconds or ISO-8601" }),
  value: z.union([z.number(), z.string()]).optional().openapi({ description: "Consumption since the previous reading" }),
  meter: z.union([z.number(), z.string()]).optional().openapi({ description: "Cumulative register (instead of value)" }),
  source: z.enum(SOURCES).optional(),
  flow: z.enum(FLOWS).optional()
}).openapi("EnergyImportRow")

const NDJSON_TYPES = new Set(["application/x-ndjson", "application/ndjson", "application/jsonl", "application/jsonlines", "application/x-jsonlines"])
const isImportMediaType = (type: string) => type === "application/json" || type.endsWith("+json") || NDJSON_TYPES.has(type)

/** `GET /energy/{electricity|gas|water}` and their bulk imports (API-DECISIONS "Energy readings"). */
export const energyRoutes = (api: Api): void => {
  for (const kind of ENERGY_KINDS) {
    api.route({
      method: "get",
      path: `/energy/${kind}`,
      tag: "Energy",
      summary: `${kind[0].toUpperCase()}${kind.slice(1)} per interval (${units[kind]})`,
      description: "Sums per bucket over `[since, until)` (or `current`/`previous`), buckets aligned in the time zone " +
        "(days, Monday weeks and months at local midnight). Every bucket of the range is returned, `\"0\"` where nothing " +
        "was read; without `since` the series starts at the bucket of the first reading, without `until` it ends now. " +
        `\`breakdown=country\` groups by the spaces' ISO 3166 alpha-3 country (\`${UNKNOWN_COUNTRY}\` without one). ` +
        "Pass `continuationToken` back to get the next page; it is null on the last.",
      access: "read",
      query: energyQuery,
      response: envelope(readingSchemas[kind], kind),
      handle: function*({ principal, query }) {
        const now = yield* Clock.currentTimeMillis
        const sql = yield* Sql
        return yield* energyPage(sql, principal.organisationId, {
          kind,
          spaceId: query["space.id"],
          deviceId: query["device.id"],
          since: query.since,
          until: query.until,
          interval: query.interval,
          timezone: query.timezone,
          current: query.current,
          previous: query.previous,
          breakdown: query.breakdown,
          source: query.source,
          flow: query.flow,
          limit: query.limit,
          continuationToken: query.continuationToken,
          rollups: query.rollups ?? true
        }, now)
      }
    })

    api.route({
      method: "post",
      path: `/energy/${kind}/readings`,
      tag: "Energy",
      summary: `Import ${kind} readings`,
      description: `A JSON array or NDJSON (\`application/x-ndjson\`) of up to ${MAX_IMPORT_ROWS} rows ` +
        "`{device, timestamp, value | meter, source?, flow?}`; `device` is an id or `{id}`. All rows are stored or none: " +
        "the 400 names the first bad row (`rows[17].timestamp`). `meter` rows are taken in timestamp order per meter.",
      access: "write",
      rawBody: { schema: z.array(importRow), mediaTypes: ["application/json", "application/x-ndjson"] },
      response: z.object({ imported: z.number().int(), stored: z.number().int(), baselines: z.number().int() }),
      handle: function*({ principal, c }) {
        const type = (c.req.header("content-type") ?? "").split(";")[0].trim().toLowerCase()
        if (!isImportMediaType(type)) return yield* new UnsupportedMediaType({ contentType: type || "(none)" })
        if (Number(c.req.header("content-length") ?? "0") > IMPORT_BODY_LIMIT) return yield* new PayloadTooLarge({ limit: IMPORT_BODY_LIMIT })
        const text = yield* Effect.promise(() => c.req.text())
        const rows = parseImportBody(kind, text)
        if (rows instanceof InvalidInput) return yield* rows
        return yield* Sql.use((sql) => importReadings(sql, principal.organisationId, rows))
      }
    })
  }
}
