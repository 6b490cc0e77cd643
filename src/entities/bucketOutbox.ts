import { Deferred, Effect, Exit, Queue, type Scope } from "effect"

/**
 * The effects of a device bucket's steps (`DeviceBucket.ts`), performed in the order of the
 * steps, off the bucket's mailbox: a step decides (its machines move, its reads are done, its
 * rows are captured) and goes on to the next message; what it decided is performed here.
 *
 * Two lanes, each one batch at a time, in order:
 * - alerts: the steps' raises and clears (one `Apply` to the bucket's AlertBucket);
 * - rows: the steps' device rows, then their spaces' changes; steps enter it once their alerts
 *   were applied, and while they are there the next steps' alerts go ahead.
 *
 * What queues for a lane while it is busy is taken together, in order, as one batch (as a group
 * commit does): a burst of steps costs a few statements and messages, not a few per step. So
 * alerts come before the rows that record them, rows are written in the order of the steps, and
 * a step's alerts never wait for an earlier step's rows and spaces: when devices of a bucket fall
 * due while it performs an earlier step, their offline alerts follow the earlier ones at once. A
 * process that dies with steps queued loses nothing the store does not keep: a deadline stays in
 * its device's row until the step that fired it wrote that row, and a sign of life is in
 * `device_seen.last_seen_at`.
 *
 * `enqueue` answers once the step's rows are done (a `Seen` waits for it; timers do not). A
 * batch that dies is logged and its lane goes on: its steps' deadlines are still in the rows, and
 * the sweep (`overdue.ts`) fires them again.
 */
export interface BucketOutbox<A, R> {
  /** Queues a step's alerts and rows; the answer completes when its rows are done. */
  readonly enqueue: (step: { readonly alerts: ReadonlyArray<A>; readonly rows: R }) => Effect.Effect<Deferred.Deferred<void>>
  /** Steps queued or being performed. */
  readonly size: () => number
}

interface Queued<A, R> {
  readonly alerts: ReadonlyArray<A>
  readonly rows: R
  readonly done: Deferred.Deferred<void>
}

export const makeBucketOutbox = <A, R>(options: {
  readonly what: string
  /** Applies the alerts of some steps, in order (never empty). */
  readonly alerts: (alerts: ReadonlyArray<A>) => Effect.Effect<void>
  /** Writes the rows of some steps, in order. */
  readonly rows: (rows: ReadonlyArray<R>) => Effect.Effect<void>
}): Effect.Effect<BucketOutbox<A, R>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const alertLane = yield* Queue.unbounded<Queued<A, R>>()
    const rowLane = yield* Queue.unbounded<Queued<A, R>>()
    let size = 0
    const finish = Effect.fnUntraced(function*(steps: ReadonlyArray<Queued<A, R>>, exit: Exit.Exit<void>) {
      size -= steps.length
      if (Exit.isFailure(exit)) yield* Effect.logError(`${options.what}: the effects of ${steps.length} steps were not performed`, exit.cause)
      for (const step of steps) yield* Deferred.done(step.done, exit)
    })
    yield* Effect.forkScoped(Effect.forever(Effect.gen(function*() {
      const steps = yield* Queue.takeAll(alertLane)
      const alerts = steps.flatMap((s) => s.alerts)
      const exit = alerts.length === 0 ? Exit.void : yield* Effect.exit(options.alerts(alerts))
      if (Exit.isFailure(exit)) return yield* finish(steps, exit)
      yield* Queue.offerAll(rowLane, steps)
    })))
    yield* Effect.forkScoped(Effect.forever(Effect.gen(function*() {
      const steps = yield* Queue.takeAll(rowLane)
      yield* finish(steps, yield* Effect.exit(options.rows(steps.map((s) => s.rows))))
    })))
    return {
      enqueue: Effect.fnUntraced(function*({ alerts, rows }: { readonly alerts: ReadonlyArray<A>; readonly rows: R }) {
        const done = yield* Deferred.make<void>()
        size++
        yield* Queue.offer(alertLane, { alerts, rows, done })
        return done
      }),
      size: () => size
    }
  })
