import { z } from "@hono/zod-openapi"
import { Effect, Predicate } from "effect"
import { makeDeviceResolver } from "../../../ingest/devices.ts"
import { Ingest } from "../../../ingest/Ingest.ts"
import { commandRunInput, deviceRefSchema, slugify } from "../../../ingest/schemas.ts"
import { deleteRow, getOne, insertRow, listOf, type Table, updateRow } from "../../../store/crud.ts"
import { Sql } from "../../../store/Sql.ts"
import { commandQuery } from "../../../store/traffic.ts"
import { readBody } from "../body.ts"
import { idParams, listParams } from "../params.ts"
import { type Api, listReply, validate } from "../route.ts"
import { deletedSchema } from "../schemas.ts"
import { deviceOfOrganisation, formData, isJson } from "./traffic.ts"

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

/** Commands and their runs over REST (API-DECISIONS "Commands"). */
export const commandRoutes = (api: Api): void => {
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
    handle: function*({ principal, body, c }) {
      const data = isJson(c.req.header("content-type")) ? body.data : yield* formData(body.data)
      const run = yield* Ingest.use((ingest) => ingest.runCommand({ principal, protocol: "http", device: body.device, payload: { ...body, data } }))
      return { id: run.id, running: true, slug: run.slug, data: run.data, device: run.device, command: run.command, timestamp: run.timestamp }
    }
  })

  api.route({
    method: "post",
    path: "/commands",
    tag: "Commands",
    summary: "Create a command for a device",
    description: "`slug` defaults to the name in lower-case kebab form and is unique per device (409). " +
      "The device is named by `device.id` or `device.customId` (a device that exists: none is created).",
    access: "write",
    body: z.object({ name: z.string().min(1).max(200), slug: slugSchema.optional(), device: deviceRefSchema }),
    response: commandSchema,
    handle: function*({ principal, body }) {
      const sql = yield* Sql
      const slug = body.slug ?? slugify(body.name)
      // Named as an ingest names it (id, customId, or both agreeing); none is created: a command
      // configures a device, it does not act as one (a new customId is 404).
      const deviceId = yield* makeDeviceResolver(sql, () => Effect.void).resolveDevice(principal, body.device, false)
      const id = yield* insertRow(sql, commandsTable, principal.organisationId, { name: body.name, slug, device: { id: deviceId } })
      return yield* getOne(sql, commandQuery, principal.organisationId, id)
    }
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
    handle: function*({ principal, params, body }) {
      const sql = yield* Sql
      yield* updateRow(sql, commandsTable, principal.organisationId, params.id, body)
      if (body.slug !== undefined) yield* Ingest.use((ingest) => ingest.commandsChanged(principal.organisationId))
      return yield* getOne(sql, commandQuery, principal.organisationId, params.id)
    }
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
        Effect.andThen(Ingest.use((ingest) => ingest.commandsChanged(principal.organisationId))),
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
    handle: function*({ principal, query: fromQuery, c }) {
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
    }
  })
}
