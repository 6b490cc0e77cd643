import { z } from "@hono/zod-openapi"
import { Effect, Predicate } from "effect"
import type { Principal } from "../../../auth/Principal.ts"
import { Forbidden, InvalidInput, NotFound, PayloadTooLarge } from "../../../domain/errors.ts"
import { Ingest } from "../../../ingest/Ingest.ts"
import { parseJsonOrText } from "../../../ingest/payload.ts"
import { commandRunInput, deviceRefSchema, eventInput, locationInput, MAX_EVENT_FILE_BYTES, slugify } from "../../../ingest/schemas.ts"
import { deleteRow, getOne, insertRow, listOf, type Table, updateRow } from "../../../store/crud.ts"
import { Sql } from "../../../store/Sql.ts"
import { commandQuery, eventQuery, locationQuery } from "../../../store/traffic.ts"
import type { EventFile } from "../../../store/Writer.ts"
import { readBody } from "../body.ts"
import { idParams, listParams } from "../params.ts"
import { type Api, listReply, validate } from "../route.ts"
import { deletedSchema } from "../schemas.ts"

const eventSchema = z.object({
  id: z.string(),
  name: z.string(),
  data: z.unknown(),
  timestamp: z.number().int(),
  device: z.object({ id: z.string() }),
  file: z.object({ filename: z.string().nullable(), contentType: z.string(), size: z.number().int() }).optional()
}).openapi("Event")

const locationSchema = z.object({
  id: z.string(),
  latitude: z.string(),
  longitude: z.string(),
  altitude: z.string().nullable(),
  timestamp: z.number().int(),
  device: z.object({ id: z.string() })
}).openapi("Location")

const commandSchema = z.object({
  id: z.string(),
  name: z.string(),
  slug: z.string(),
  device: z.object({ id: z.string() }),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("Command")

const commandRunSchema = z.object({
  id: z.string(),
  running: z.literal(true),
  slug: z.string(),
  data: z.unknown(),
  device: z.object({ id: z.string() }),
  command: z.object({ id: z.string() }),
  timestamp: z.number().int()
}).openapi("CommandRun")

const commandsTable: Table = {
  name: "commands",
  resource: "command",
  prefix: "cmd",
  columns: { name: { column: "name" }, slug: { column: "slug" } },
  references: { device: { column: "device_id", table: "devices", resource: "device" } },
  unique: { field: "slug", scope: "per device" }
}

/**
 * Body parameters flattened to the strings a query string would carry (`{device: {id}}` →
 * `device.id`), so that one schema validates both. Anything that is not a scalar is kept as
 * it is and refused by the schema, naming the field.
 */
const bodyParams = (body: unknown, prefix = ""): Record<string, unknown> => {
  if (!Predicate.isObject(body) || Array.isArray(body)) return {}
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(body)) {
    if (Predicate.isObject(value) && !Array.isArray(value)) Object.assign(out, bodyParams(value, `${prefix}${key}.`))
    else out[`${prefix}${key}`] = typeof value === "number" || typeof value === "boolean" ? String(value) : value
  }
  return out
}

const slugSchema = z.string().min(1).max(200).regex(/^[a-z0-9]+(?:-[a-z0-9]+)*$/, { message: "must be lower-case kebab-case" })

/** 404 unless the device is one of the organisation's (an id of another is never revealed). */
const deviceOfOrganisation = (principal: Principal, deviceId: string) =>
  Sql.use((sql) => sql.query("SELECT 1 FROM devices WHERE id = $1 AND organisation_id = $2", [deviceId, principal.organisationId])).pipe(
    Effect.flatMap((rows) => rows.length === 0 ? Effect.fail(new NotFound({ resource: "device", id: deviceId })) : Effect.succeed(deviceId))
  )

/** Reads of a device's history: a device key reads only itself; others name a device of theirs. */
const historyDevice = (principal: Principal, deviceId: string | undefined) => {
  if (principal.kind === "device") {
    if (deviceId !== undefined && deviceId !== principal.id) {
      return Effect.fail(new Forbidden({ message: "a device key may only read its own device" }))
    }
    return Effect.succeed(principal.id)
  }
  return deviceId === undefined
    ? Effect.fail(new InvalidInput({ field: "device.id", message: "device.id: is required" }))
    : deviceOfOrganisation(principal, deviceId)
}

/** A device key reads only its own device's events and locations: another's is 403, as its device would be. */
const ownedByCaller = <T extends { device: { id: string } }>(principal: Principal, resource: string) => (value: T) =>
  principal.kind === "device" && value.device.id !== principal.id
    ? Effect.fail(new Forbidden({ message: `a device key may only read its own device's ${resource}s` }))
    : Effect.succeed(value)

/**
 * Form fields arrive as text: `data` that parses as JSON is taken as that JSON, under the
 * payload policy like any other JSON; other text stays text.
 */
const formData = (value: unknown): Effect.Effect<unknown, InvalidInput> => {
  if (typeof value !== "string") return Effect.succeed(value)
  const parsed = parseJsonOrText(value, "data")
  return parsed instanceof InvalidInput ? Effect.fail(parsed) : Effect.succeed(parsed.value)
}

const isJson = (contentType: string | undefined) => /json/i.test(contentType ?? "")

/** Events, locations and commands over REST (API-DECISIONS "Commands"). */
export const trafficRoutes = (api: Api): void => {
  api.route({
    method: "post",
    path: "/events",
    tag: "Events",
    summary: "Publish an event",
    description: "JSON, form-encoded, or multipart with a `file` part. A device key publishes as its device; " +
      "an application names the device with `device.id` or `device.customId` (created when new). " +
      "Answers once the event is stored.",
    access: "any",
    bodyLimit: MAX_EVENT_FILE_BYTES + 64 * 1024,
    body: eventInput.extend({ file: z.unknown().optional().openapi({ type: "string", format: "binary" }) }),
    response: eventSchema,
    handler: ({ principal, body, c }) =>
      Effect.gen(function*() {
        let file: EventFile | undefined
        if (body.file !== undefined) {
          if (!(body.file instanceof File)) return yield* new InvalidInput({ field: "file", message: "file: must be a multipart file part" })
          if (body.file.size > MAX_EVENT_FILE_BYTES) return yield* new PayloadTooLarge({ limit: MAX_EVENT_FILE_BYTES })
          const part = body.file
          file = {
            filename: part.name || null,
            contentType: part.type || "application/octet-stream",
            bytes: new Uint8Array(yield* Effect.promise(() => part.arrayBuffer()))
          }
        }
        const data = isJson(c.req.header("content-type")) ? body.data : yield* formData(body.data)
        return yield* Ingest.use((ingest) =>
          ingest.event({ principal, protocol: "http", device: body.device, payload: { ...body, data, file } })
        )
      })
  })

  api.route({
    method: "get",
    path: "/events/:id",
    tag: "Events",
    summary: "Get an event",
    access: "any",
    params: idParams,
    response: eventSchema,
    handler: ({ principal, params }) =>
      Sql.use((sql) => getOne(sql, eventQuery, principal.organisationId, params.id)).pipe(
        Effect.flatMap(ownedByCaller(principal, "event"))
      )
  })

  api.route({
    method: "get",
    path: "/events/:id/file",
    tag: "Events",
    summary: "Download the file attached to an event",
    access: "any",
    params: idParams,
    response: z.string().openapi({ format: "binary" }),
    handler: ({ principal, params, c }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        const event = yield* getOne(sql, eventQuery, principal.organisationId, params.id).pipe(
          Effect.flatMap(ownedByCaller(principal, "event"))
        )
        const [row] = yield* sql.query<{ bytes: Uint8Array; content_type: string; filename: string | null }>(
          "SELECT bytes, content_type, filename FROM event_files WHERE event_id = $1",
          [event.id]
        )
        if (row === undefined) return yield* new NotFound({ resource: "file of event", id: params.id })
        return c.body(new Uint8Array(row.bytes), 200, {
          "content-type": row.content_type,
          ...(row.filename ? { "content-disposition": `attachment; filename="${row.filename.replace(/["\\\r\n]/g, "_")}"` } : {})
        })
      })
  })

  api.route({
    method: "get",
    path: "/events",
    tag: "Events",
    summary: "List a device's events",
    access: "any",
    query: z.object({
      "device.id": z.string().max(200).optional(),
      name: z.string().max(200).optional(),
      ...listParams(Object.keys(eventQuery.order), "timestamp")
    }),
    response: z.object({ events: z.array(eventSchema), count: z.number().int() }),
    handler: ({ principal, query }) =>
      Effect.gen(function*() {
        const deviceId = yield* historyDevice(principal, query["device.id"])
        const page = yield* Sql.use((sql) =>
          listOf(sql, eventQuery, principal.organisationId, [["device_id", deviceId], ["name", query.name]], {
            ...query,
            orderBy: eventQuery.order[query.order]
          })
        )
        return listReply(page, "events")
      })
  })

  api.route({
    method: "post",
    path: "/locations",
    tag: "Locations",
    summary: "Publish a location",
    description: "latitude and longitude as numbers or numeric strings; returned as strings.",
    access: "any",
    body: locationInput,
    response: locationSchema,
    handler: ({ principal, body }) =>
      Ingest.use((ingest) => ingest.location({ principal, protocol: "http", device: body.device, payload: body }))
  })

  api.route({
    method: "get",
    path: "/locations/:id",
    tag: "Locations",
    summary: "Get a location",
    access: "any",
    params: idParams,
    response: locationSchema,
    handler: ({ principal, params }) =>
      Sql.use((sql) => getOne(sql, locationQuery, principal.organisationId, params.id)).pipe(
        Effect.flatMap(ownedByCaller(principal, "location"))
      )
  })

  api.route({
    method: "get",
    path: "/locations",
    tag: "Locations",
    summary: "List a device's locations",
    access: "any",
    query: z.object({ "device.id": z.string().max(200).optional(), ...listParams(Object.keys(locationQuery.order), "timestamp") }),
    response: z.object({ locations: z.array(locationSchema), count: z.number().int() }),
    handler: ({ principal, query }) =>
      Effect.gen(function*() {
        const deviceId = yield* historyDevice(principal, query["device.id"])
        const page = yield* Sql.use((sql) =>
          listOf(sql, locationQuery, principal.organisationId, [["device_id", deviceId]], {
            ...query,
            orderBy: locationQuery.order[query.order]
          })
        )
        return listReply(page, "locations")
      })
  })

  api.route({
    method: "post",
    path: "/commands/run",
    tag: "Commands",
    summary: "Run a command on a device",
    description: "Finds the command by `slug` and device (or by `id`) and delivers the run on " +
      "`devices/{id}/commands/{slug}/run`.",
    access: "write",
    body: commandRunInput,
    response: commandRunSchema,
    handler: ({ principal, body, c }) =>
      Effect.gen(function*() {
        const data = isJson(c.req.header("content-type")) ? body.data : yield* formData(body.data)
        return yield* Ingest.use((ingest) => ingest.runCommand({ principal, protocol: "http", device: body.device, payload: { ...body, data } }))
      }).pipe(
        Effect.map((run) => ({ id: run.id, running: true, slug: run.slug, data: run.data, device: run.device, command: run.command, timestamp: run.timestamp }))
      )
  })

  api.route({
    method: "post",
    path: "/commands",
    tag: "Commands",
    summary: "Create a command for a device",
    description: "`slug` defaults to the name in lower-case kebab form and is unique per device (409).",
    access: "write",
    body: z.object({ name: z.string().min(1).max(200), slug: slugSchema.optional(), device: deviceRefSchema.extend({ id: z.string().min(1).max(200) }) }),
    response: commandSchema,
    handler: ({ principal, body }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        const slug = body.slug ?? slugify(body.name)
        const id = yield* insertRow(sql, commandsTable, principal.organisationId, { name: body.name, slug, device: { id: body.device.id } })
        return yield* getOne(sql, commandQuery, principal.organisationId, id)
      })
  })

  api.route({
    method: "get",
    path: "/commands/:id",
    tag: "Commands",
    summary: "Get a command",
    access: "read",
    params: idParams,
    response: commandSchema,
    handler: ({ principal, params }) => Sql.use((sql) => getOne(sql, commandQuery, principal.organisationId, params.id))
  })

  api.route({
    method: "put",
    path: "/commands/:id",
    tag: "Commands",
    summary: "Rename a command or change its slug",
    access: "write",
    params: idParams,
    body: z.object({ name: z.string().min(1).max(200).optional(), slug: slugSchema.optional() }),
    response: commandSchema,
    handler: ({ principal, params, body }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        yield* updateRow(sql, commandsTable, principal.organisationId, params.id, body)
        return yield* getOne(sql, commandQuery, principal.organisationId, params.id)
      })
  })

  api.route({
    method: "delete",
    path: "/commands/:id",
    tag: "Commands",
    summary: "Delete a command",
    access: "write",
    params: idParams,
    response: deletedSchema,
    handler: ({ principal, params }) =>
      Sql.use((sql) => deleteRow(sql, commandsTable, principal.organisationId, params.id)).pipe(
        Effect.as({ id: params.id, deleted: true })
      )
  })

  const commandListQuery = z.object({ "device.id": z.string().max(200).optional(), ...listParams(Object.keys(commandQuery.order), "createdAt") })
  api.route({
    method: "get",
    path: "/commands",
    tag: "Commands",
    summary: "List commands, optionally of one device",
    description: "The parameters `device.id`, `limit`, `page`, `order` and `sort` come as query parameters or, as the " +
      "interface description has it, in a JSON or form-encoded body; a query parameter wins over the same one in the body.",
    access: "read",
    query: commandListQuery,
    response: z.object({ commands: z.array(commandSchema), count: z.number().int() }),
    handler: ({ principal, query: fromQuery, c }) =>
      Effect.gen(function*() {
        let query = fromQuery
        const length = c.req.header("content-length")
        if ((length !== undefined && length !== "0") || c.req.header("transfer-encoding") !== undefined) {
          const body = yield* readBody(c)
          query = yield* validate(commandListQuery, { ...bodyParams(body), ...c.req.query() }, "query")
        }
        const deviceId = query["device.id"]
        if (deviceId !== undefined) yield* deviceOfOrganisation(principal, deviceId)
        const page = yield* Sql.use((sql) =>
          listOf(sql, commandQuery, principal.organisationId, [["device_id", deviceId]], {
            ...query,
            orderBy: commandQuery.order[query.order]
          })
        )
        return listReply(page, "commands")
      })
  })
}
