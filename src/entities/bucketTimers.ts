import { Clock, Effect, Scope } from "effect"
import { WAKE_QUANTUM_MS } from "./protocol.ts"

/**
 * The two timers of a device bucket (`DeviceBucket.ts`) for its devices' offline deadlines:
 *
 * - the stored wake-up (`Wake`, persisted, delivered to whichever process owns the bucket then):
 *   one at or before the earliest deadline, rounded up to WAKE_QUANTUM_MS so that devices
 *   falling silent together share it; what a new owner after a handover or restart relies on;
 * - this instance's own timer (`Tick`, volatile, sent to itself at the deadline): fires on time,
 *   without waiting for the stored message to be read back; lost with the instance.
 *
 * Both are handled alike, between the bucket's other messages; whichever comes second finds
 * nothing due.
 */
export interface BucketTimers {
  /**
   * Keeps a stored wake-up at or before `deadline`'s quantum: none is asked for when one is
   * pending before it (its handler asks for the next). Never for a quantum already past: its key
   * may be one the cluster delivered already, and would store nothing.
   */
  readonly cover: (deadline: number | null | undefined, now: number) => Effect.Effect<void>
  /** Sets this instance's timer for `deadline`, unless it is set for it or earlier already. */
  readonly arm: (deadline: number | undefined) => Effect.Effect<void>
  /** A stored wake-up or a tick for `at` arrived. */
  readonly arrived: (at: number, stored: boolean) => void
}

export const makeBucketTimers = (options: {
  /** Stores a wake-up for `at` (retried until stored). */
  readonly store: (at: number) => Effect.Effect<void>
  /** Sends this instance a tick for `at`. */
  readonly tick: (at: number) => Effect.Effect<void, unknown>
  /** The instance's scope: its timers end with it. */
  readonly scope: Scope.Scope
}): BucketTimers => {
  /** Stored wake-ups asked for and not received. */
  const pending = new Set<number>()
  /** Times this instance's timer is set for. */
  const ticks = new Set<number>()
  return {
    cover: (deadline, now) => {
      if (deadline === null || deadline === undefined) return Effect.void
      const at = Math.ceil(Math.max(deadline, now + 1) / WAKE_QUANTUM_MS) * WAKE_QUANTUM_MS
      for (const p of pending) if (p <= at) return Effect.void
      pending.add(at)
      return options.store(at)
    },
    arm: (deadline) =>
      Effect.suspend(() => {
        if (deadline === undefined) return Effect.void
        for (const t of ticks) if (t <= deadline) return Effect.void
        ticks.add(deadline)
        return Effect.flatMap(Clock.currentTimeMillis, (now) =>
          options.tick(deadline).pipe(
            Effect.delay(Math.max(0, deadline - now)),
            // Not delivered (the bucket is leaving this process): its stored wake-up stands in,
            // and a later deadline may set the timer again.
            Effect.catchCause(() => Effect.sync(() => ticks.delete(deadline))),
            Effect.forkIn(options.scope),
            Effect.asVoid
          ))
      }),
    arrived: (at, stored) => {
      if (stored) pending.delete(at)
      else ticks.delete(at)
    }
  }
}
