import type { ResourceQuery, Table } from "./crud.ts"
import { bool, num, obj, optStr, str } from "./rows.ts"
import type { Row } from "./Sql.ts"

export const spacesTable: Table = {
  name: "spaces",
  resource: "space",
  prefix: "spc",
  columns: {
    clientId: { column: "client_id" },
    name: { column: "name" },
    isPublic: { column: "is_public" },
    disabled: { column: "disabled" },
    avatar: { column: "avatar", json: true },
    timezone: { column: "timezone" },
    country: { column: "country" }
  },
  references: {}
}

export interface SpaceJson {
  id: string
  clientId: string | null
  name: string
  isPublic: boolean
  disabled: boolean
  avatar: { default?: string; url?: string; thumbnail?: string } | null
  owner: { organisation: { id: string; name: string } }
  timezone: string
  country: string | null
  createdAt: number
  updatedAt: number
}

/** `row` is a spaces row (or its `to_jsonb`), `organisationName` from the join. */
export const toSpace = (row: Row, organisationName: string): SpaceJson => ({
  id: str(row, "id"),
  clientId: optStr(row, "client_id"),
  name: str(row, "name"),
  isPublic: bool(row, "is_public"),
  disabled: bool(row, "disabled"),
  avatar: obj(row, "avatar"),
  owner: { organisation: { id: str(row, "organisation_id"), name: organisationName } },
  timezone: str(row, "timezone"),
  country: optStr(row, "country"),
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

export const spaceQuery: ResourceQuery<SpaceJson> = {
  resource: "space",
  select: "s.*, o.name AS organisation_name",
  from: "spaces s JOIN organisations o ON o.id = s.organisation_id",
  base: "spaces s",
  alias: "s",
  map: (row) => toSpace(row, str(row, "organisation_name")),
  order: { createdAt: "s.created_at", updatedAt: "s.updated_at", id: "s.id", name: "s.name" }
}
