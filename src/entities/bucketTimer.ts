import { Clock, Effect, Scope } from "effect"

/**
 * A device bucket's own timer (`DeviceBucket.ts`) for its devices' offline deadlines: `Tick`,
 * a volatile message the bucket sends itself at its earliest deadline, handled between its other
 * messages. It fires on time, and is lost with the instance: the deadlines stay in the devices'
 * rows (`device_actors.wake_at`), which the sweep of stored deadlines (`overdue.ts`) reads.
 */
export interface BucketTimer {
  /** Sets the timer for `deadline`, unless it is set for it or earlier already. */
  readonly arm: (deadline: number | undefined) => Effect.Effect<void>
  /** A tick for `at` arrived. */
  readonly arrived: (at: number) => void
}

export const makeBucketTimer = (options: {
  /** Sends this instance a tick for `at`. */
  readonly tick: (at: number) => Effect.Effect<void, unknown>
  /** The instance's scope: its timer ends with it. */
  readonly scope: Scope.Scope
}): BucketTimer => {
  /** Times the timer is set for. */
  const ticks = new Set<number>()
  return {
    arm: (deadline) =>
      Effect.suspend(() => {
        if (deadline === undefined) return Effect.void
        for (const t of ticks) if (t <= deadline) return Effect.void
        ticks.add(deadline)
        return Effect.flatMap(Clock.currentTimeMillis, (now) =>
          options.tick(deadline).pipe(
            Effect.delay(Math.max(0, deadline - now)),
            // Not delivered (the bucket is leaving this process): its rows keep the deadline, and
            // a later deadline may set the timer again.
            Effect.catchCause(() => Effect.sync(() => ticks.delete(deadline))),
            Effect.forkIn(options.scope),
            Effect.asVoid
          ))
      }),
    arrived: (at) => {
      ticks.delete(at)
    }
  }
}
