import { Effect } from "effect"
import { livenessOf, type SeededAlert, type SeededDevice } from "../../actors/spaceMachine.ts"
import type { SqlClient } from "../store/Sql.ts"

/**
 * What the Space entity reads from the store: its seed on activation and on `Reseed` (the
 * space's settings, its devices with the liveness their device entity last wrote, the open
 * alerts of those devices), and whether a device it does not hold belongs to it.
 */

export interface SpaceSeed {
  /** False when the space is not in the store (deleted): it answers empty counts. */
  readonly exists: boolean
  readonly timezone: string
  readonly recipients: ReadonlyArray<string>
  readonly devices: ReadonlyArray<SeededDevice>
  readonly alerts: ReadonlyArray<SeededAlert>
}

export const readSeed = Effect.fnUntraced(function*(sql: SqlClient, spaceId: string) {
  const [space] = yield* sql.query<{ timezone: string }>("SELECT timezone FROM spaces WHERE id = $1", [spaceId])
  if (space === undefined) return { exists: false, timezone: "", recipients: [], devices: [], alerts: [] } satisfies SpaceSeed
  const recipients = yield* sql.query<{ organisation_user_id: string }>(
    "SELECT organisation_user_id FROM space_alert_users WHERE space_id = $1 ORDER BY created_at, organisation_user_id",
    [spaceId]
  )
  const devices = yield* sql.query<{ id: string; liveness: string | null; liveness_at: unknown }>(
    `SELECT d.id, da.liveness, da.liveness_at FROM devices d LEFT JOIN device_actors da ON da.device_id = d.id
     WHERE d.space_id = $1`,
    [spaceId]
  )
  const alerts = yield* sql.query<{ id: string; device_id: string }>(
    `SELECT al.id, al.device_id FROM alerts al JOIN devices d ON d.id = al.device_id
     WHERE d.space_id = $1 AND al.resolved_at IS NULL`,
    [spaceId]
  )
  return {
    exists: true,
    timezone: space.timezone,
    recipients: recipients.map((r) => r.organisation_user_id),
    devices: devices.map((d) => ({ deviceId: d.id, liveness: livenessOf(d.liveness), at: Number(d.liveness_at ?? 0) })),
    alerts: alerts.map((a) => ({ alertId: a.id, deviceId: a.device_id }))
  } satisfies SpaceSeed
})

/** Devices as the store has them: their space now and their stored liveness; a device gone is left out. */
export const readDevices = (sql: SqlClient, deviceIds: ReadonlyArray<string>) =>
  Effect.map(
    sql.query<{ id: string; space_id: string | null; liveness: string | null; liveness_at: unknown }>(
      `SELECT d.id, d.space_id, da.liveness, da.liveness_at FROM devices d LEFT JOIN device_actors da ON da.device_id = d.id
       WHERE d.id = ANY($1::text[])`,
      [deviceIds]
    ),
    (rows) => new Map(rows.map((row) => [row.id, { spaceId: row.space_id, liveness: livenessOf(row.liveness), at: Number(row.liveness_at ?? 0) }]))
  )
