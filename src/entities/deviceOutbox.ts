import { type Deferred, Effect, Schedule, type Scope } from "effect"
import type { SqlClient } from "../store/Sql.ts"
import { makeBucketOutbox } from "./bucketOutbox.ts"
import { type CapturedRow, captureRow, type DeviceRow, writeCapturedRows } from "./deviceRows.ts"
import type { AlertIntent, DeviceLiveness } from "./protocol.ts"
import type { SpaceChange, SpaceChanges } from "./spaceChanges.ts"

/**
 * What a device bucket's steps do outside (`DeviceBucket.ts`), through its ordered outbox
 * (`bucketOutbox.ts`): a step's alerts go to its AlertBucket, then its rows, captured as the
 * step ended, are written, then its spaces are told. Every send and statement is retried without
 * end: the effects of a step are not dropped.
 */

/** Sends and statements are retried without end (at most every 5 s). */
const RETRY = Schedule.min([Schedule.exponential("50 millis"), Schedule.spaced("5 seconds")])
/** A message not answered by then is sent again (applying it twice is harmless). */
export const SEND_TIMEOUT = "30 seconds"

export const retried = <A, E, R>(effect: Effect.Effect<A, E, R>, what: string) =>
  effect.pipe(
    Effect.tapError((e) => Effect.logWarning(`device bucket: ${what} failed, retrying`, e)),
    Effect.retry(RETRY),
    Effect.orDie
  )

/** A step's rows in the outbox: captured when it ended, with the spaces to tell once they are written. */
interface QueuedRows {
  readonly now: number
  readonly captured: ReadonlyArray<CapturedRow>
  readonly changes: ReadonlyArray<SpaceChange>
}

export interface DeviceOutbox {
  /**
   * Queues a step's alerts, and its rows captured now with the spaces' liveness changes to tell
   * after them; each device's liveness is `planned` from here on. The answer completes when the
   * step's rows and spaces are done.
   */
  readonly enqueue: (
    now: number,
    intents: ReadonlyArray<AlertIntent>,
    rows: ReadonlyArray<DeviceRow>,
    bySpace: ReadonlyMap<string, ReadonlyArray<DeviceLiveness>>
  ) => Effect.Effect<Deferred.Deferred<void>>
}

export const makeDeviceOutbox = (options: {
  readonly bucket: string
  readonly sql: SqlClient
  /** The bucket's AlertBucket: applies raises and clears. */
  readonly apply: (intents: ReadonlyArray<AlertIntent>) => Effect.Effect<unknown, unknown>
  readonly spaceChanges: SpaceChanges["Service"]
}): Effect.Effect<DeviceOutbox, never, Scope.Scope> =>
  Effect.gen(function*() {
    const outbox = yield* makeBucketOutbox({
      what: `device bucket ${options.bucket}`,
      alerts: (intents: ReadonlyArray<AlertIntent>) => retried(Effect.timeout(options.apply(intents), SEND_TIMEOUT), "sending alerts"),
      rows: Effect.fnUntraced(function*(steps: ReadonlyArray<QueuedRows>) {
        const captured = steps.flatMap((s) => s.captured)
        if (captured.length > 0) {
          let now = 0
          for (const step of steps) now = Math.max(now, step.now)
          yield* retried(writeCapturedRows(options.sql, captured, now), "writing devices").pipe(
            Effect.ensuring(Effect.sync(() => {
              for (const row of captured) row.device.pending--
            }))
          )
          for (const row of captured) {
            row.device.reported = row.liveness
            row.device.reportedAt = row.livenessAt
          }
        }
        // After the rows: a space seeded from the store is never older than a change it was told.
        // `SpaceChanges` merges what several steps tell one space into one message.
        const changes = steps.flatMap((s) => s.changes)
        if (changes.length > 0) yield* retried(Effect.timeout(options.spaceChanges.tell(changes), SEND_TIMEOUT), "telling spaces")
      })
    })
    return {
      enqueue: (now, intents, rows, bySpace) =>
        Effect.suspend(() => {
          const captured = rows.map(captureRow)
          for (const row of captured) {
            row.device.planned = row.liveness
            row.device.plannedAt = row.livenessAt
            row.device.pending++
            row.device.dirty = false
          }
          const changes = [...bySpace].map(([spaceId, devices]) => ({ spaceId, devices, alerts: [] }))
          return outbox.enqueue({ alerts: intents, rows: { now, captured, changes } })
        })
    }
  })
