import { Effect, type Schedule } from "effect"

/**
 * `Effect.retry(self, { schedule, while })` for a hot path whose first attempt almost always
 * succeeds. `Effect.retry` builds its policy each time the effect runs, before the first attempt:
 * the options' schedule (`passthrough`, `while`) and the step functions of every schedule in it.
 * For the MQTT store-behind policy (five schedules) that was ~9 KB of garbage per command run and
 * per publish outside the fast path, of 32 KB in all (bench:ingest's MQTT command case, a sampling
 * heap profile of the main thread: 32.3 → 23.3 KB per run).
 *
 * Here the policy is built only once the first attempt failed with an error `while` retries; from
 * then on the attempts and waits are `Effect.retry`'s, as if that failure had been its first
 * attempt's (the schedule's clock, `Schedule.during`, starts at it).
 */
export const retryFailed = <A, E, R, B, Env>(
  self: Effect.Effect<A, E, R>,
  options: { readonly schedule: Schedule.Schedule<B, NoInfer<E>, never, Env>; readonly while: (error: E) => boolean }
): Effect.Effect<A, E, R | Env> =>
  Effect.catchIf(self, options.while, (first) => {
    let replayed = false
    // The failure already met stands as the retry's first attempt: the next runs `self` again.
    const attempt = Effect.suspend(() => {
      if (replayed) return self
      replayed = true
      return Effect.fail(first)
    })
    return Effect.retry(attempt, options)
  })
