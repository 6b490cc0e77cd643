import { Cause, type Duration, Effect, FiberSet, Option, Schedule, type Scope, Semaphore } from "effect"
import { Bus } from "../bus/Bus.ts"
import { Sql, type SqlError } from "../store/Sql.ts"

export interface CredentialWatch {
  /**
   * This process changed a credential, after its transaction committed: it is applied here at
   * once, whatever the store or the bus do, and the bus tells the other processes to look now.
   */
  readonly changedHere: Effect.Effect<void>
}

export interface CredentialWatchOptions {
  /** How often the store's change counter is read: the longest a lost bus notice delays a revocation. */
  readonly every: Duration.Input
  /**
   * Drops cached credentials and re-checks open sessions against the store. Fails when the
   * store did not answer: the same change is applied again at the next poll.
   */
  readonly apply: Effect.Effect<void, SqlError>
}

/**
 * Revocation that does not trust the bus (core NATS is at most once): the triggers of
 * `migrations/0007_credential_changes.sql` bump one counter whenever a credential ends or
 * changes, whoever wrote it, and every process reads that counter on a short period. The bus
 * notice only makes the other processes read it sooner.
 */
export const watchCredentials = (options: CredentialWatchOptions): Effect.Effect<CredentialWatch, never, Scope.Scope | Sql | Bus> =>
  Effect.gen(function*() {
    const sql = yield* Sql
    const bus = yield* Bus
    const run = yield* FiberSet.makeRuntime<never>()
    // One check at a time: a burst of notices then costs one re-check, not one each.
    const lock = yield* Semaphore.make(1)
    /** The counter as of the last applied check; open sessions hold against every change up to it. */
    let seen: string | undefined
    let failing = false

    const readVersion = sql.query<{ version: string }>("SELECT version::text AS version FROM credential_changes").pipe(
      Effect.map(([row]) => row?.version)
    )
    // Read before applying, so the re-check that follows sees every change the counter counts.
    const applyUpTo = (version: string | undefined) =>
      Effect.andThen(options.apply, Effect.sync(() => {
        if (version !== undefined) seen = version
      }))
    const whenMoved = lock.withPermit(Effect.flatMap(readVersion, (version) => version === seen ? Effect.void : applyUpTo(version)))
    // Here even when the counter cannot be read: this process knows a change happened.
    const always = lock.withPermit(Effect.flatMap(Effect.option(readVersion), (version) => applyUpTo(Option.getOrUndefined(version))))

    /** Logs the first failure of a run of them and the recovery, not every period. */
    const logged = (check: Effect.Effect<void, SqlError>) =>
      check.pipe(
        Effect.matchCauseEffect({
          onFailure: (cause) => {
            if (failing) return Effect.void
            failing = true
            const error = Cause.squash(cause)
            return Effect.logWarning(
              `credential changes not applied: ${error instanceof Error ? error.message : String(error)}; ` +
                "open sessions keep their credentials until the store answers again"
            )
          },
          onSuccess: () => {
            if (!failing) return Effect.void
            failing = false
            return Effect.logInfo("credential changes applied again")
          }
        })
      )

    yield* Effect.forkScoped(Effect.repeat(logged(whenMoved), Schedule.spaced(options.every)))
    yield* bus.onControl((message) => {
      if (message.type === "credentials.changed") run(logged(whenMoved))
    })

    return {
      changedHere: Effect.andThen(
        Effect.sync(() => run(logged(always))),
        bus.control({ type: "credentials.changed" })
      )
    }
  })
