import { z } from "@hono/zod-openapi"
import { Effect } from "effect"
import type { Principal } from "../../../auth/Principal.ts"
import { Forbidden, InvalidInput, NotFound, PayloadTooLarge } from "../../../domain/errors.ts"
import { type EventJson, Ingest } from "../../../ingest/Ingest.ts"
import { parseJsonOrText } from "../../../ingest/payload.ts"
import { eventInput, locationInput, MAX_EVENT_FILE_BYTES } from "../../../ingest/schemas.ts"
import { getOne, type ListParams, listOf, type Page } from "../../../store/crud.ts"
import { DeviceReads } from "../../../store/DeviceReads.ts"
import { Sql, type SqlError } from "../../../store/Sql.ts"
import { eventQuery, locationQuery } from "../../../store/traffic.ts"
import type { EventFile } from "../../../store/Writer.ts"
import { idParams, listParams } from "../params.ts"
import { type Api, JsonText, listReply } from "../route.ts"

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

/** 404 unless the device is one of the organisation's (an id of another is never revealed). */
export const deviceOfOrganisation = (principal: Principal, deviceId: string) =>
  Sql.use((sql) => sql.query("SELECT 1 FROM devices WHERE id = $1 AND organisation_id = $2", [deviceId, principal.organisationId])).pipe(
    Effect.flatMap((rows) => rows.length === 0 ? Effect.fail(new NotFound({ resource: "device", id: deviceId })) : Effect.succeed(deviceId))
  )

/**
 * Reads of a device's history: a device key reads only itself; others name a device of theirs.
 * The device whose history is read, and the store's check that it is the organisation's (none
 * for a device key), apart: a cached events page runs the check only when it reads the store.
 */
const historyOf = (
  principal: Principal,
  deviceId: string | undefined
): Effect.Effect<{ readonly deviceId: string; readonly check: Effect.Effect<unknown, NotFound | SqlError, Sql> }, Forbidden | InvalidInput> => {
  if (principal.kind === "device") {
    return deviceId !== undefined && deviceId !== principal.id
      ? Effect.fail(new Forbidden({ message: "a device key may only read its own device" }))
      : Effect.succeed({ deviceId: principal.id, check: Effect.void })
  }
  return deviceId === undefined
    ? Effect.fail(new InvalidInput({ field: "device.id", message: "device.id: is required" }))
    : Effect.succeed({ deviceId, check: deviceOfOrganisation(principal, deviceId) })
}

/** The device whose history is read, checked at once. */
const historyDevice = (principal: Principal, deviceId: string | undefined) =>
  Effect.flatMap(historyOf(principal, deviceId), ({ deviceId, check }) => Effect.as(check, deviceId))

/** A device key reads only its own device's events and locations: another's is 403, as its device would be. */
const ownedByCaller = <T extends { device: { id: string } }>(principal: Principal, resource: string) => (value: T) =>
  principal.kind === "device" && value.device.id !== principal.id
    ? Effect.fail(new Forbidden({ message: `a device key may only read its own device's ${resource}s` }))
    : Effect.succeed(value)

/**
 * Form fields arrive as text: `data` that parses as JSON is taken as that JSON, under the
 * payload policy like any other JSON; other text stays text.
 */
export const formData = (value: unknown): Effect.Effect<unknown, InvalidInput> => {
  if (typeof value !== "string") return Effect.succeed(value)
  const parsed = parseJsonOrText(value, "data")
  return parsed instanceof InvalidInput ? Effect.fail(parsed) : Effect.succeed(parsed.value)
}

export const isJson = (contentType: string | undefined) => /json/i.test(contentType ?? "")

/** An events page's answer as text, memoised per page read: a cached page is stringified once. */
const eventsTexts = new WeakMap<object, string>()
const eventsText = (page: Page<EventJson>): string => {
  const known = eventsTexts.get(page)
  if (known !== undefined) return known
  const text = JSON.stringify({ events: page.items, count: page.total })
  eventsTexts.set(page, text)
  return text
}

/** Events and locations over REST (commands: `commands.ts`). */
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
    handle: function*({ principal, body, c }) {
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
    }
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
    handle: function*({ principal, params, c }) {
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
    }
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
    handle: function*({ principal, query }) {
      const { deviceId, check } = yield* historyOf(principal, query["device.id"])
      const organisationId = principal.organisationId
      const filters = [["device_id", deviceId], ["name", query.name]] as const
      const list: ListParams = { ...query, orderBy: eventQuery.order[query.order] }
      // Cached, with the check that the device is the organisation's (a device of another is
      // never a page, so it stays 404): a new event of the device (its delivery) drops the
      // page, and so does the device deleted (its events with it: devices.changed).
      const page = yield* DeviceReads.use((reads) =>
        reads.page(
          organisationId,
          `events ${JSON.stringify([organisationId, filters, list])}`,
          { devices: () => [deviceId], anySign: false },
          Effect.andThen(check, Sql.use((sql) => listOf(sql, eventQuery, organisationId, filters, list)))
        )
      )
      return new JsonText(eventsText(page), { "X-Total-Count": String(page.total) })
    }
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
    handle: function*({ principal, query }) {
      const deviceId = yield* historyDevice(principal, query["device.id"])
      const page = yield* Sql.use((sql) =>
        listOf(sql, locationQuery, principal.organisationId, [["device_id", deviceId]], {
          ...query,
          orderBy: locationQuery.order[query.order]
        })
      )
      return listReply(page, "locations")
    }
  })

}
