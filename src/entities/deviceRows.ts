import { Effect } from "effect"
import { LAST_SEEN } from "../store/devices.ts"
import type { SqlClient, SqlError } from "../store/Sql.ts"
import { coalesce, perClient } from "./coalesce.ts"
import type { Activation, HostedDevice, Liveness } from "./deviceHost.ts"
import { livenessOf } from "./deviceHost.ts"
import { persisted } from "./deviceSteps.ts"
import { bucketOf } from "./protocol.ts"
import type { Place } from "./rules.ts"

/**
 * What a device bucket reads and writes in the store: a device's `devices` row (where it is,
 * when it was last seen) with its `device_actors` row (machine snapshot, the liveness its space
 * counts, its deadline and bucket), and the rules it has an open alert for. The statements the
 * buckets run on every step are coalesced across buckets (`coalesce.ts`).
 */

const num = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value))
const json = (value: unknown): unknown => (typeof value === "string" ? JSON.parse(value) : value)

interface ActivationRow {
  readonly id: string
  readonly organisation_id: string
  readonly space_id: string | null
  readonly product_id: string | null
  readonly last_seen_at: unknown
  readonly snapshot: unknown
  readonly wake_at: unknown
  readonly liveness: string | null
  readonly liveness_at: unknown
}

const activationRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (ids: ReadonlyArray<string>) =>
      sql.query<ActivationRow>(
        `SELECT d.id, d.organisation_id, d.space_id, d.product_id, ${LAST_SEEN} AS last_seen_at, a.snapshot, a.wake_at, a.liveness, a.liveness_at
         FROM devices d LEFT JOIN device_actors a ON a.device_id = d.id WHERE d.id = ANY($1::text[])`,
        [[...new Set(ids)]]
      ),
    itemKey: (id) => id,
    outputKey: (row) => row.id
  })
)

/** The devices among `ids` that exist, ready to be activated (without the rules they have an open alert for). */
export const readActivations = (sql: SqlClient, ids: ReadonlyArray<string>): Effect.Effect<Array<Activation>, SqlError> =>
  Effect.map(activationRows(sql)(ids), (rows) =>
    rows.map((r) => ({
      deviceId: r.id,
      place: { organisationId: r.organisation_id, spaceId: r.space_id, productId: r.product_id },
      lastSeenAt: num(r.last_seen_at),
      snapshot: r.snapshot === null ? null : json(r.snapshot),
      wakeAt: num(r.wake_at),
      liveness: livenessOf(r.liveness),
      livenessAt: num(r.liveness_at) ?? 0,
      raised: []
    })))

/** The rules each of these devices has an open alert for. */
export const readOpenAlerts = (sql: SqlClient, ids: ReadonlyArray<string>) =>
  ids.length === 0 ? Effect.succeed(new Map<string, Array<string>>()) : Effect.map(
    sql.query<{ device_id: string; alert_rule_id: string }>(
      "SELECT device_id, alert_rule_id FROM alerts WHERE device_id = ANY($1::text[]) AND resolved_at IS NULL",
      [ids]
    ),
    (rows) => {
      const open = new Map<string, Array<string>>()
      for (const r of rows) open.set(r.device_id, [...(open.get(r.device_id) ?? []), r.alert_rule_id])
      return open
    }
  )

interface PlaceRow {
  readonly id: string
  readonly organisation_id: string
  readonly space_id: string | null
  readonly product_id: string | null
  readonly last_seen_at: unknown
}

const placeRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (ids: ReadonlyArray<string>) =>
      sql.query<PlaceRow>(`SELECT d.id, d.organisation_id, d.space_id, d.product_id, ${LAST_SEEN} AS last_seen_at FROM devices d WHERE d.id = ANY($1::text[])`, [[
        ...new Set(ids)
      ]]),
    itemKey: (id) => id,
    outputKey: (row) => row.id
  })
)

/** Where the devices are now and their newest sign of life; a deleted device is left out. */
export const readPlaces = (sql: SqlClient, ids: ReadonlyArray<string>) =>
  Effect.map(placeRows(sql)(ids), (rows) =>
    new Map(rows.map((r) => [r.id, {
      place: { organisationId: r.organisation_id, spaceId: r.space_id, productId: r.product_id } satisfies Place,
      lastSeenAt: num(r.last_seen_at)
    }])))

const timedRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (buckets: ReadonlyArray<string>) =>
      sql.query<{ device_id: string; bucket: string }>(
        "SELECT device_id, bucket FROM device_actors WHERE bucket = ANY($1::text[]) AND wake_at IS NOT NULL",
        [[...new Set(buckets)]]
      ),
    itemKey: (bucket) => bucket,
    outputKey: (row) => row.bucket
  })
)

/** The devices of a bucket whose rows hold a deadline (hosted by the bucket's last owner); coalesced across buckets. */
export const readTimed = (sql: SqlClient, bucket: string) =>
  Effect.map(timedRows(sql)([bucket]), (rows) => rows.map((r) => r.device_id))

export interface DeviceRow {
  readonly device: HostedDevice
  readonly liveness: Liveness
  readonly livenessAt: number
}

interface StoredRow {
  readonly id: string
  readonly snapshot: string
  readonly liveness: Liveness
  readonly livenessAt: number
  readonly wakeAt: number | null
  readonly now: number
}

const storeRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (items: ReadonlyArray<StoredRow>) => {
      // One row per device (the last one given): a statement may not update a row twice.
      const rows = [...new Map(items.map((r) => [r.id, r])).values()]
      return sql.query(
        `INSERT INTO device_actors (device_id, snapshot, liveness, liveness_at, wake_at, updated_at, bucket)
         SELECT u.id, u.snapshot::jsonb, u.liveness, u.liveness_at, u.wake_at, u.now, u.bucket
         FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::int8[], $7::text[])
           AS u(id, snapshot, liveness, liveness_at, wake_at, now, bucket)
         WHERE EXISTS (SELECT 1 FROM devices d WHERE d.id = u.id)
         ON CONFLICT (device_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, liveness = EXCLUDED.liveness,
           liveness_at = EXCLUDED.liveness_at, wake_at = EXCLUDED.wake_at, updated_at = EXCLUDED.updated_at, bucket = EXCLUDED.bucket`,
        [
          rows.map((r) => r.id),
          rows.map((r) => r.snapshot),
          rows.map((r) => r.liveness),
          rows.map((r) => r.livenessAt),
          rows.map((r) => r.wakeAt),
          rows.map((r) => r.now),
          rows.map((r) => bucketOf(r.id))
        ]
      ).pipe(Effect.as([] as ReadonlyArray<never>))
    },
    itemKey: (row) => row.id,
    outputKey: (none: never) => none
  })
)

/** A device's row as of now: its machine's snapshot, liveness and deadline. */
export interface CapturedRow {
  readonly device: HostedDevice
  readonly snapshot: string
  readonly liveness: Liveness
  readonly livenessAt: number
  readonly wakeAt: number | null
}

/** Takes a device's row now: its machine may move on before the row is written. */
export const captureRow = (r: DeviceRow): CapturedRow => ({
  device: r.device,
  snapshot: JSON.stringify(persisted(r.device.snapshot)),
  liveness: r.liveness,
  livenessAt: r.livenessAt,
  wakeAt: r.device.wakeAt
})

/**
 * Stores devices' rows as captured: machine snapshots with their liveness and deadline
 * (`wake_at`). A deleted device is skipped (its row went with it).
 */
export const writeCapturedRows = (sql: SqlClient, rows: ReadonlyArray<CapturedRow>, now: number) =>
  Effect.suspend(() => {
    const stored = rows.map((r) => ({ id: r.device.id, snapshot: r.snapshot, liveness: r.liveness, livenessAt: r.livenessAt, wakeAt: r.wakeAt, now }))
    return Effect.map(storeRows(sql)(stored), () => {
      for (const r of rows) r.device.storedWakeAt = r.wakeAt
    })
  })

/** Captures the rows now and stores them. */
export const writeDeviceRows = (sql: SqlClient, rows: ReadonlyArray<DeviceRow>, now: number) =>
  Effect.suspend(() => writeCapturedRows(sql, rows.map(captureRow), now))
