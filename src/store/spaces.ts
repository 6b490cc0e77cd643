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
  /**
   * Devices by liveness and open alerts, from the space's entity (`presentSpaces` adds it where
   * the space is read on its own or listed).
   */
  live?: { devicesOnline: number; devicesOffline: number; openAlerts: number }
  /** Who receives the space's alert e-mails (present where the space is read on its own or listed). */
  alertUsers?: Array<{ id: string; fullName: string; emailAddress: string }>
  createdAt: number
  updatedAt: number
}

/** `row` is a spaces row (or its `to_jsonb`), `organisationName` from the join. */
export const toSpace = (row: Row, organisationName: string): SpaceJson => {
  const space: SpaceJson = {
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
  }
  if (Array.isArray(row.alert_users)) {
    space.alertUsers = (row.alert_users as Array<Row>).map((u) => ({
      id: str(u, "id"),
      fullName: str(u, "full_name"),
      emailAddress: str(u, "email_address")
    }))
  }
  return space
}

export const spaceQuery: ResourceQuery<SpaceJson> = {
  resource: "space",
  select: `s.*, o.name AS organisation_name,
    COALESCE((SELECT json_agg(json_build_object('id', ou.id, 'full_name', u.full_name, 'email_address', u.email_address) ORDER BY a.created_at)
              FROM space_alert_users a JOIN organisation_users ou ON ou.id = a.organisation_user_id JOIN users u ON u.id = ou.user_id
              WHERE a.space_id = s.id), '[]'::json) AS alert_users`,
  from: "spaces s JOIN organisations o ON o.id = s.organisation_id",
  base: "spaces s",
  alias: "s",
  map: (row) => toSpace(row, str(row, "organisation_name")),
  order: { createdAt: "s.created_at", updatedAt: "s.updated_at", id: "s.id", name: "s.name" }
}
