import { Clock, Effect } from "effect"
import { Singleton } from "effect/cluster"
import { Sql, type SqlClient } from "../store/Sql.ts"
import { DeviceBucket, Wake } from "./protocol.ts"

/**
 * OverdueDevices, one per cluster (`Singleton`): every SWEEP_EVERY, the buckets of the devices
 * whose stored deadline (`device_actors.wake_at`) passed more than GRACE_MS ago are sent a `Wake`,
 * which fires every deadline due in the bucket (`DeviceBucket.ts`).
 *
 * A bucket's owner fires its deadlines with its own timer and writes the next one to the rows
 * as it goes, so normally this finds nothing. What it finds are the deadlines of a process that
 * died (once the survivors own its shards), or of a cluster that was down, or of a bucket no
 * process hosts yet: a device that fell silent then gets its one offline alert GRACE_MS to
 * GRACE_MS + SWEEP_EVERY after its deadline, or once its bucket has an owner again. The deadline
 * stays in the rows until a bucket step handled it, so a `Wake` lost on the way is sent again.
 */
export const GRACE_MS = 3_000
const SWEEP_EVERY = "1 second"
/** Buckets woken at once. */
const CONCURRENCY = 16

export const overdueBuckets = (sql: SqlClient, before: number) =>
  Effect.map(
    sql.query<{ bucket: string }>("SELECT DISTINCT bucket FROM device_actors WHERE wake_at < $1 AND bucket IS NOT NULL", [before]),
    (rows) => rows.map((r) => r.bucket)
  )

export const OverdueDevicesLive = Singleton.make(
  "voltaic/OverdueDevices",
  Effect.gen(function*() {
    const sql = yield* Sql
    const buckets = yield* DeviceBucket.client
    const sweep = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const overdue = yield* overdueBuckets(sql, now - GRACE_MS)
      yield* Effect.forEach(overdue, (bucket) =>
        buckets(bucket).Wake(new Wake({ bucket, at: now }), { discard: true }).pipe(
          Effect.catchCause((cause) => Effect.logWarning(`overdue devices: bucket ${bucket} not woken, next sweep`, cause))
        ), { concurrency: CONCURRENCY, discard: true })
    }).pipe(Effect.catchCause((cause) => Effect.logWarning("overdue devices: sweep failed", cause)))
    // At once on start (this process may have just taken over from one that died), then every second.
    yield* Effect.forever(Effect.andThen(sweep, Effect.sleep(SWEEP_EVERY)))
  })
)
