import type { ResourceQuery, Table } from "./crud.ts"
import { toProduct, type ProductJson } from "./products.ts"
import { bool, nested, num, obj, optNum, optStr, str } from "./rows.ts"
import type { Row, SqlClient } from "./Sql.ts"
import { toSpace, type SpaceJson } from "./spaces.ts"
import { eventQuery, locationQuery, toEvent, toLocation } from "./traffic.ts"
import type { EventJson, LocationJson } from "../ingest/Ingest.ts"

export const devicesTable: Table = {
  name: "devices",
  resource: "device",
  prefix: "dev",
  unique: { field: "customId", scope: "in the organisation" },
  columns: {
    isMain: { column: "is_main" },
    isActive: { column: "is_active" },
    name: { column: "name" },
    customId: { column: "custom_id" },
    serialNumber: { column: "serial_number" },
    batchNumber: { column: "batch_number" },
    state: { column: "state", json: true },
    meta: { column: "meta", json: true },
    wifi: { column: "wifi", json: true },
    cellular: { column: "cellular", json: true },
    bluetooth: { column: "bluetooth", json: true },
    lora: { column: "lora", json: true },
    sigfox: { column: "sigfox", json: true }
  },
  references: {
    space: { column: "space_id", table: "spaces", resource: "space" },
    product: { column: "product_id", table: "products", resource: "product" },
    place: { column: "place_id", table: "places", resource: "place" },
    gateway: { column: "gateway_id", table: "gateways", resource: "gateway" }
  }
}

export interface DeviceJson {
  id: string
  isMain: boolean
  isActive: boolean
  name: string
  customId: string | null
  serialNumber: string | null
  batchNumber: string | null
  space: SpaceJson | null
  product: ProductJson | null
  place: { id: string } | null
  gateway: { id: string } | null
  organisation: { id: string; name: string }
  /** The latest event, if any (`LATEST_EVENT`). */
  events: Array<EventJson>
  location: LocationJson | null
  state: Record<string, unknown> | null
  meta: Record<string, unknown> | null
  wifi: Record<string, unknown> | null
  cellular: Record<string, unknown> | null
  bluetooth: Record<string, unknown> | null
  lora: Record<string, unknown> | null
  sigfox: Record<string, unknown> | null
  lastSeenAt: number | null
  lastUnprocessedEventTimestamp: number | null
  lastProcessedEventTimestamp: number | null
  createdAt: number
  updatedAt: number
}

/**
 * What a device's `device_actors` row says of its machine, read with the device: the live fields
 * where no owner holds it in memory (`DeviceOwners.withLive`, which takes it out of the answer).
 */
export interface StoredLive {
  readonly state: string | null
  readonly lastSeenAt: number | null
}

/** A device as read from the store: its JSON and what its machine's row says. */
export type DeviceRead = DeviceJson & { readonly stored: StoredLive }

/**
 * The live fields a `device_actors` row's snapshot holds (alias `da`), as one value: `[state,
 * lastSeenAt]` as text, read back by `storedOf`.
 */
export const STORED_LIVE = "jsonb_build_array(da.snapshot->>'value', da.snapshot->'context'->>'lastSeenAt')"

/** `STORED_LIVE` as read; null (no `device_actors` row): nothing stored. */
export const storedOf = (value: unknown): StoredLive => {
  const [state, seen] = Array.isArray(value) ? value : []
  return { state: typeof state === "string" ? state : null, lastSeenAt: typeof seen === "string" && seen !== "" ? Number(seen) : null }
}

const ref = (row: Row, column: string): { id: string } | null => {
  const id = optStr(row, column)
  return id === null ? null : { id }
}

export const toDevice = (row: Row): DeviceRead => {
  const organisationName = str(row, "organisation_name")
  const space = nested(row, "space_row")
  const product = nested(row, "product_row")
  const latestEvent = nested(row, "latest_event")
  const latestLocation = nested(row, "latest_location")
  return {
    id: str(row, "id"),
    isMain: bool(row, "is_main"),
    isActive: bool(row, "is_active"),
    name: str(row, "name"),
    customId: optStr(row, "custom_id"),
    serialNumber: optStr(row, "serial_number"),
    batchNumber: optStr(row, "batch_number"),
    space: space === null ? null : toSpace(space, organisationName),
    product: product === null ? null : toProduct(product),
    place: ref(row, "place_id"),
    gateway: ref(row, "gateway_id"),
    organisation: { id: str(row, "organisation_id"), name: organisationName },
    events: latestEvent === null ? [] : [toEvent(latestEvent)],
    location: latestLocation === null ? null : toLocation(latestLocation),
    state: obj(row, "state"),
    meta: obj(row, "meta"),
    wifi: obj(row, "wifi"),
    cellular: obj(row, "cellular"),
    bluetooth: obj(row, "bluetooth"),
    lora: obj(row, "lora"),
    sigfox: obj(row, "sigfox"),
    lastSeenAt: optNum(row, "last_seen_at"),
    lastUnprocessedEventTimestamp: optNum(row, "last_unprocessed_event_timestamp"),
    lastProcessedEventTimestamp: optNum(row, "last_processed_event_timestamp"),
    createdAt: num(row, "created_at"),
    updatedAt: num(row, "updated_at"),
    stored: storedOf(row.stored)
  }
}

/**
 * A device's (alias `d`) latest event and latest location, as the Device of the interface embeds
 * them (`events`: the latest event, or none; `location`: the latest location, or null), each read
 * by its index on (device, timestamp) and answered as `GET /events` and `GET /locations` answer
 * it. A device's cached read and pages go with every delivery of its events and locations
 * (`DeviceReads`), so they stay current.
 */
const LATEST_EVENT = `(SELECT to_jsonb(x) FROM (SELECT ${eventQuery.select} FROM ${eventQuery.from}
  WHERE e.device_id = d.id ORDER BY e.timestamp DESC, e.id DESC LIMIT 1) x)`
const LATEST_LOCATION = `(SELECT to_jsonb(x) FROM (SELECT ${locationQuery.select} FROM ${locationQuery.from}
  WHERE l.device_id = d.id ORDER BY l.timestamp DESC, l.id DESC LIMIT 1) x)`

/** A device's (alias `d`) `lastSeenAt`, from its row of `device_seen` (migrations/0021). */
export const LAST_SEEN = "(SELECT ds.last_seen_at FROM device_seen ds WHERE ds.device_id = d.id)"

export const deviceQuery: ResourceQuery<DeviceRead> = {
  resource: "device",
  // What a device embeds, each by its primary key in a subquery rather than a join: Postgres
  // plans a list's statement on every execution (its LIMIT, OFFSET and filters are parameters),
  // and a five-way join cost 0.5–1.9 ms to plan against 0.2 ms this way (EXPLAIN on bench:rest's
  // database). The machine's row comes along: a list needs no second statement for the devices
  // no owner holds.
  select: `d.*, (SELECT o.name FROM organisations o WHERE o.id = d.organisation_id) AS organisation_name,
    (SELECT to_jsonb(s) FROM spaces s WHERE s.id = d.space_id) AS space_row,
    (SELECT to_jsonb(p) FROM products p WHERE p.id = d.product_id) AS product_row,
    (SELECT ${STORED_LIVE} FROM device_actors da WHERE da.device_id = d.id) AS stored,
    ${LAST_SEEN} AS last_seen_at, ${LATEST_EVENT} AS latest_event, ${LATEST_LOCATION} AS latest_location`,
  from: "devices d",
  base: "devices d",
  alias: "d",
  map: toDevice,
  order: {
    createdAt: "d.created_at",
    updatedAt: "d.updated_at",
    id: "d.id",
    name: "d.name",
    customId: "d.custom_id",
    // A device never seen sorts as the least recently seen: last of `DESC` (the default), first of `ASC`.
    lastSeenAt: `COALESCE(${LAST_SEEN}, -1)`
  }
}

const SEEN_ROWS = "WITH u AS (SELECT * FROM unnest($1::text[], $2::int8[]) AS u(id, seen))"

/**
 * The devices' `device_seen` rows (migrations/0021) are found by joins, as the writer's
 * `events_written` finds them: the update's former `d.id = ANY(ARRAY(SELECT id FROM locked))` was
 * planned on a small table as a scan of every row against every locked id. Postgres, 1,000
 * devices, 10 a statement (a scratch comparison, alternated, on `devices`): 61.0 µs of the
 * backend's CPU per device against 87.0; 100 a statement the same.
 */
const TOUCH = `${SEEN_ROWS},
     locked AS (SELECT ds.device_id, u.seen FROM device_seen ds JOIN u ON u.id = ds.device_id
                WHERE ds.last_seen_at IS NULL OR ds.last_seen_at < u.seen
                ORDER BY ds.device_id FOR NO KEY UPDATE OF ds)
     UPDATE device_seen ds SET last_seen_at = GREATEST(COALESCE(ds.last_seen_at, 0), locked.seen)
     FROM locked WHERE ds.device_id = locked.device_id RETURNING ds.device_id AS id`

/** `TOUCH` for PGlite: one session, so no other transaction holds these rows and no lock order is needed. */
const TOUCH_ONE_SESSION = `${SEEN_ROWS}
     UPDATE device_seen ds SET last_seen_at = u.seen
     FROM u WHERE ds.device_id = u.id AND (ds.last_seen_at IS NULL OR ds.last_seen_at < u.seen) RETURNING ds.device_id AS id`

/**
 * Moves devices' `lastSeenAt` forward to the given times (never back) and answers the ids it
 * moved. Rows are locked in id order first, so two writers touching the same devices at once
 * queue behind each other instead of deadlocking (NO KEY: the lock UPDATE takes anyway); rows
 * already as recent are left alone. In a transaction that also inserts events or locations, it
 * comes after them: their devices' rows are locked (the device check, the foreign key) before
 * their `device_seen` rows, the order a device's deletion takes them in. The Writer's
 * one-statement events batch does the same inside the function `events_written`
 * (migrations/0021, src/store/batch.ts).
 */
export const touchDevices = (client: SqlClient, seen: ReadonlyMap<string, number>) =>
  client.query<{ id: string }>(
    client.dialect === "pglite" ? TOUCH_ONE_SESSION : TOUCH,
    [[...seen.keys()], [...seen.values()]]
  )
