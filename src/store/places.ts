import type { ResourceQuery, Table } from "./crud.ts"
import { num, obj, optStr, str } from "./rows.ts"
import type { Row } from "./Sql.ts"

export const placesTable: Table = {
  name: "places",
  resource: "place",
  prefix: "plc",
  columns: {
    name: { column: "name" },
    state: { column: "state", json: true },
    config: { column: "config", json: true }
  },
  references: { space: { column: "space_id", table: "spaces", resource: "space" } }
}

export interface PlaceJson {
  id: string
  name: string
  state: Record<string, unknown> | null
  config: Record<string, unknown> | null
  space: { id: string } | null
  createdAt: number
  updatedAt: number
}

export const toPlace = (row: Row): PlaceJson => {
  const spaceId = optStr(row, "space_id")
  return {
    id: str(row, "id"),
    name: str(row, "name"),
    state: obj(row, "state"),
    config: obj(row, "config"),
    space: spaceId === null ? null : { id: spaceId },
    createdAt: num(row, "created_at"),
    updatedAt: num(row, "updated_at")
  }
}

export const placeQuery: ResourceQuery<PlaceJson> = {
  resource: "place",
  select: "p.*",
  from: "places p",
  base: "places p",
  alias: "p",
  map: toPlace,
  order: { createdAt: "p.created_at", updatedAt: "p.updated_at", id: "p.id", name: "p.name" }
}
