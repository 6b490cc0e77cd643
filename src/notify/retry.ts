import { Duration, Effect, Ref, Schedule, Schema } from "effect"

/** One failed delivery attempt: a network error, a timeout or a refusing answer. */
export class DeliveryFailure extends Schema.TaggedError<DeliveryFailure>()("DeliveryFailure", {
  message: Schema.String,
  /** Worth another attempt: network errors, timeouts, HTTP 5xx and 429, SMTP 4xx. */
  retryable: Schema.Boolean,
  /** The HTTP status or SMTP reply code of the answer, when there was one. */
  statusCode: Schema.optional(Schema.Number)
}) {}

/** How hard a delivery is tried. */
export interface RetryPolicy {
  /** Delay before the first retry; doubles each time, up to `maxDelay`. */
  readonly baseDelay: Duration.Input
  readonly maxDelay: Duration.Input
  /** Attempts in all, the first one included. */
  readonly maxAttempts: number
  /** No retry starts later than this after the first failure. */
  readonly maxElapsed: Duration.Input
  /** Each attempt is abandoned (and counts as retryable) after this long. */
  readonly attemptTimeout: Duration.Input
  /** Spread delays by ±20 % so many failing receivers are not retried in lockstep. */
  readonly jitter: boolean
}

/**
 * 5 attempts, 0.5 s → 1 s → 2 s → 4 s apart: a receiver restarting or shedding
 * load gets ~8 s to recover, and with 10 s per attempt the whole delivery stays
 * within about a minute.
 */
export const defaultRetryPolicy: RetryPolicy = {
  baseDelay: "500 millis",
  maxDelay: "15 seconds",
  maxAttempts: 5,
  maxElapsed: "1 minute",
  attemptTimeout: "10 seconds",
  jitter: true
}

/** Capped exponential backoff that stops at the first failure that is not retryable. */
export const retrySchedule = (policy: RetryPolicy) => {
  const backoff = Schedule.min([Schedule.exponential(policy.baseDelay), Schedule.spaced(policy.maxDelay)])
  const maxElapsed = Duration.toMillis(policy.maxElapsed)
  return (policy.jitter ? Schedule.jittered(backoff) : backoff).pipe(
    Schedule.upTo({ times: policy.maxAttempts - 1 }),
    Schedule.setInputType<DeliveryFailure>(),
    Schedule.while(({ input, elapsed, duration }) => input.retryable && elapsed + Duration.toMillis(duration) <= maxElapsed)
  )
}

/** What a retried delivery came to, and how many attempts it took. */
export type Attempted<A> =
  | { readonly _tag: "success"; readonly value: A; readonly attempts: number }
  | { readonly _tag: "failure"; readonly failure: DeliveryFailure; readonly attempts: number }

/** Runs `attempt` under `policy`: a per-attempt timeout, then retries as {@link retrySchedule} allows. */
export const withRetry = Effect.fnUntraced(function*<A>(attempt: Effect.Effect<A, DeliveryFailure>, policy: RetryPolicy) {
  const attempts = yield* Ref.make(0)
  const timeout = Duration.fromInputUnsafe(policy.attemptTimeout)
  const timed = Ref.update(attempts, (n) => n + 1).pipe(
    Effect.andThen(attempt),
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () => Effect.fail(new DeliveryFailure({ message: `no answer within ${Duration.format(timeout)}`, retryable: true }))
    }),
    Effect.tapError((failure) => Effect.logDebug("notification attempt failed", failure.message))
  )
  return yield* timed.pipe(
    Effect.retry(retrySchedule(policy)),
    Effect.matchEffect({
      onSuccess: (value) => Effect.map(Ref.get(attempts), (n): Attempted<A> => ({ _tag: "success", value, attempts: n })),
      onFailure: (failure) => Effect.map(Ref.get(attempts), (n): Attempted<A> => ({ _tag: "failure", failure, attempts: n }))
    })
  )
})
