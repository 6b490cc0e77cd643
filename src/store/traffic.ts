import type { EventJson, LocationJson } from "../ingest/Ingest.ts"
import type { ResourceQuery } from "./crud.ts"
import { num, optStr, str } from "./rows.ts"
import type { Row } from "./Sql.ts"

export const toEvent = (row: Row): EventJson => {
  const json: EventJson = {
    id: str(row, "id"),
    name: str(row, "name"),
    data: row.data ?? null,
    timestamp: num(row, "timestamp"),
    device: { id: str(row, "device_id") }
  }
  if (row.has_file === true) {
    json.file = { filename: optStr(row, "filename"), contentType: str(row, "content_type"), size: num(row, "size") }
  }
  return json
}

export const eventQuery: ResourceQuery<EventJson> = {
  resource: "event",
  select: "e.id, e.name, e.data, e.timestamp, e.device_id, e.has_file, f.filename, f.content_type, f.size",
  from: "events e LEFT JOIN event_files f ON f.event_id = e.id AND e.has_file",
  base: "events e",
  alias: "e",
  map: toEvent,
  order: { timestamp: "e.timestamp", id: "e.id", name: "e.name" },
  timeColumn: "e.timestamp"
}

export const toLocation = (row: Row): LocationJson => ({
  id: str(row, "id"),
  latitude: str(row, "latitude"),
  longitude: str(row, "longitude"),
  altitude: optStr(row, "altitude"),
  timestamp: num(row, "timestamp"),
  device: { id: str(row, "device_id") }
})

export const locationQuery: ResourceQuery<LocationJson> = {
  resource: "location",
  select: "l.id, l.latitude::text AS latitude, l.longitude::text AS longitude, l.altitude::text AS altitude, l.timestamp, l.device_id",
  from: "locations l",
  base: "locations l",
  alias: "l",
  map: toLocation,
  order: { timestamp: "l.timestamp", id: "l.id" },
  timeColumn: "l.timestamp"
}

export interface CommandJson {
  id: string
  name: string
  slug: string
  device: { id: string }
  createdAt: number
  updatedAt: number
}

export const toCommand = (row: Row): CommandJson => ({
  id: str(row, "id"),
  name: str(row, "name"),
  slug: str(row, "slug"),
  device: { id: str(row, "device_id") },
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

export const commandQuery: ResourceQuery<CommandJson> = {
  resource: "command",
  select: "c.*",
  from: "commands c",
  base: "commands c",
  alias: "c",
  map: toCommand,
  order: { createdAt: "c.created_at", updatedAt: "c.updated_at", id: "c.id", name: "c.name", slug: "c.slug" }
}
