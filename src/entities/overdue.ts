import { Clock, Effect, Layer } from "effect"
import { EntityId, Sharding } from "effect/cluster"
import { Sql, type SqlClient } from "../store/Sql.ts"
import { DeviceBucket } from "./protocol.ts"
import { ResidentBuckets } from "./residents.ts"

/**
 * The sweep of stored offline deadlines, in every process, for the device buckets whose shards
 * it owns. A deadline lives in its device's row (`device_actors.wake_at`, never later than the
 * one its owner holds); every SWEEP_EVERY this process reads the buckets whose earliest stored
 * deadline is due within LOOKAHEAD_MS, by index, and sends a `Wake` (volatile) to:
 *
 * - those not resident here, or resident but yet to read their rows' deadlines: after a restart
 *   or a handover, a bucket no process hosts yet wakes before its deadline, reads its devices
 *   that have one and fires them on its own timer, on time. One that fell due while no process
 *   owned it fires at once;
 * - those resident here whose stored deadline passed more than GRACE_MS ago: a safety net, as a
 *   bucket fires its deadlines on its own timer and rewrites its rows as it goes.
 *
 * So normally it sends nothing. The deadline stays in the rows until a bucket step handled it:
 * a `Wake` lost on the way is sent again by the next sweep.
 */
export const LOOKAHEAD_MS = 2_000
export const GRACE_MS = 3_000
const SWEEP_EVERY = "1 second"
/** Buckets woken at once. */
const CONCURRENCY = 16

/** Each bucket with a stored deadline before `before`, and its earliest. */
export const dueBuckets = (sql: SqlClient, before: number) =>
  Effect.map(
    sql.query<{ bucket: string; first: unknown }>(
      "SELECT bucket, min(wake_at) AS first FROM device_actors WHERE wake_at < $1 AND bucket IS NOT NULL GROUP BY bucket",
      [before]
    ),
    (rows) => rows.map((r) => ({ bucket: r.bucket, first: Number(r.first) }))
  )

export const OverdueDevicesLive = Layer.effectDiscard(Effect.gen(function*() {
  const sql = yield* Sql
  const sharding = yield* Sharding.Sharding
  const residents = yield* ResidentBuckets
  const buckets = yield* DeviceBucket.client
  const sweep = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const due = yield* dueBuckets(sql, now + LOOKAHEAD_MS)
    const wake = due.filter(({ bucket, first }) => {
      const id = EntityId.make(bucket)
      if (!sharding.hasShardId(sharding.getShardId(id, DeviceBucket.getShardGroup(id)))) return false
      const resident = residents.get(bucket)
      return resident === undefined || !resident.timed() || first < now - GRACE_MS
    })
    yield* Effect.forEach(wake, ({ bucket }) =>
      buckets(bucket).Wake({ at: now }, { discard: true }).pipe(
        Effect.catchCause((cause) => Effect.logWarning(`deadline sweep: bucket ${bucket} not woken, next sweep`, cause))
      ), { concurrency: CONCURRENCY, discard: true })
  }).pipe(Effect.catchCause((cause) => Effect.logWarning("deadline sweep failed", cause)))
  // At once on start (this process may have just started, or taken over), then every second.
  yield* Effect.forkScoped(Effect.forever(Effect.andThen(sweep, Effect.sleep(SWEEP_EVERY))))
}))
