import { Effect } from "effect"
import type { SqlClient, SqlError } from "../store/Sql.ts"
import type { Activation, HostedDevice, Liveness } from "./deviceHost.ts"
import { livenessOf } from "./deviceHost.ts"
import type { Place } from "./rules.ts"

/**
 * What a device bucket reads and writes in the store: a device's `devices` row (where it is,
 * when it was last seen) with its `device_actors` row (machine snapshot, the liveness its space
 * counts, the wake-up it has scheduled), and the rules it has an open alert for.
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

/** The devices among `ids` that exist, ready to be activated (without the rules they have an open alert for). */
export const readActivations = (sql: SqlClient, ids: ReadonlyArray<string>): Effect.Effect<Array<Activation>, SqlError> =>
  Effect.map(
    sql.query<ActivationRow>(
      `SELECT d.id, d.organisation_id, d.space_id, d.product_id, d.last_seen_at, a.snapshot, a.wake_at, a.liveness, a.liveness_at
       FROM devices d LEFT JOIN device_actors a ON a.device_id = d.id WHERE d.id = ANY($1::text[])`,
      [ids]
    ),
    (rows) =>
      rows.map((r) => ({
        deviceId: r.id,
        place: { organisationId: r.organisation_id, spaceId: r.space_id, productId: r.product_id },
        lastSeenAt: num(r.last_seen_at),
        snapshot: r.snapshot === null ? null : json(r.snapshot),
        wakeAt: num(r.wake_at),
        liveness: livenessOf(r.liveness),
        livenessAt: num(r.liveness_at) ?? 0,
        raised: []
      }))
  )

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

/** Where the devices are now and their newest sign of life; a deleted device is left out. */
export const readPlaces = (sql: SqlClient, ids: ReadonlyArray<string>) =>
  Effect.map(
    sql.query<{ id: string; organisation_id: string; space_id: string | null; product_id: string | null; last_seen_at: unknown }>(
      "SELECT id, organisation_id, space_id, product_id, last_seen_at FROM devices WHERE id = ANY($1::text[])",
      [ids]
    ),
    (rows) =>
      new Map(rows.map((r) => [r.id, {
        place: { organisationId: r.organisation_id, spaceId: r.space_id, productId: r.product_id } satisfies Place,
        lastSeenAt: num(r.last_seen_at)
      }]))
  )

export interface DeviceRow {
  readonly device: HostedDevice
  readonly liveness: Liveness
  readonly livenessAt: number
}

/**
 * Stores devices' machine snapshots with their liveness and scheduled wake-up. A deleted
 * device is skipped (its row went with it).
 */
export const writeDeviceRows = (sql: SqlClient, rows: ReadonlyArray<DeviceRow>, now: number) =>
  rows.length === 0 ? Effect.void : sql.query(
    `INSERT INTO device_actors (device_id, snapshot, liveness, liveness_at, wake_at, updated_at)
     SELECT u.id, u.snapshot::jsonb, u.liveness, u.liveness_at, u.wake_at, $6
     FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[]) AS u(id, snapshot, liveness, liveness_at, wake_at)
     WHERE EXISTS (SELECT 1 FROM devices d WHERE d.id = u.id)
     ON CONFLICT (device_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, liveness = EXCLUDED.liveness,
       liveness_at = EXCLUDED.liveness_at, wake_at = EXCLUDED.wake_at, updated_at = EXCLUDED.updated_at`,
    [
      rows.map((r) => r.device.id),
      rows.map((r) => JSON.stringify(r.device.actor.getPersistedSnapshot())),
      rows.map((r) => r.liveness),
      rows.map((r) => r.livenessAt),
      rows.map((r) => r.device.wakeAt),
      now
    ]
  ).pipe(Effect.asVoid)
