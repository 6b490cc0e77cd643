import { createHash } from "node:crypto"
import { Config, ConfigProvider, Context, Duration, Effect, Layer, Schedule } from "effect"
import { RateLimited } from "../domain/errors.ts"
import { clearAttempt, countAttempt, deleteExpired } from "../store/signInFailures.ts"
import { Sql, type SqlError } from "../store/Sql.ts"

/**
 * Failed sign-ins (`POST /auth/token` by e-mail, `POST /oauth/token` by client id), counted in
 * the store so that every process sees the same counts, over a window that starts with the
 * first failure (`SIGN_IN_WINDOW_SECONDS`, 15 minutes).
 *
 * - Per account and address: the first `freeFailures` are answered at once, the next ones are
 *   slowed by `delayStepMs` more each (at most `maxDelayMs`), and after `maxFailures` the
 *   account is refused from that address with 429 and `Retry-After` until the window ends.
 * - Per account, from every address: never a lockout, so that nobody can lock an owner out by
 *   failing from many addresses. Beyond `maxFailures` (one address's allowance) every attempt
 *   on the account, from any address, is slowed the same way.
 * - Nothing counts an address across accounts: failures against one account (existing or not)
 *   never slow or refuse another account, whichever address they come from.
 *
 * So guessing from many addresses at once gets `maxFailures` guesses per address per window,
 * each slowed: bounded, not stopped, since stopping it would let anyone lock the owner out.
 *
 * An attempt is counted before its credential is checked, in one statement, and taken back
 * when it succeeds: concurrent guesses, on one process or several, cannot all pass the check
 * before the first of them is counted. Where the runtime gives no peer address (app.request in
 * tests), all such attempts on an account share one address.
 */
export interface SignInGuardOptions {
  readonly windowMs: number
  /** Failures per account and address answered without delay. */
  readonly freeFailures: number
  /** Failures per account and address after which that pair is refused (429). */
  readonly maxFailures: number
  /** Added delay per failure beyond the free ones, capped at `maxDelayMs`. */
  readonly delayStepMs: number
  readonly maxDelayMs: number
}

export const defaultSignInGuardOptions: SignInGuardOptions = {
  windowMs: 15 * 60 * 1000,
  freeFailures: 3,
  maxFailures: 10,
  delayStepMs: 250,
  maxDelayMs: 2_000
}

/** Who tries to sign in: `user:<e-mail>` or `client:<client id>`, and the peer address if known. */
export interface SignInAttempt {
  readonly account: string
  readonly address: string | undefined
}

export interface SignInGuardService {
  /**
   * Counts an attempt before its credential is checked: waits when slowed, fails with 429
   * when the account is locked out from this address.
   */
  admit(attempt: SignInAttempt): Effect.Effect<void, RateLimited | SqlError>
  /**
   * The credential was right: the failures of this account from this address are forgotten.
   * A store failure here is logged, not raised: the sign-in itself has succeeded.
   */
  succeeded(attempt: SignInAttempt): Effect.Effect<void>
}

/** Delay before checking an attempt that follows `failures` failures, beyond `free` of them. */
export const delayAfter = (failures: number, free: number, options: SignInGuardOptions): number =>
  failures < free ? 0 : Math.min(options.maxDelayMs, (failures - free + 1) * options.delayStepMs)

/** The decision for an attempt, from the counts its own attempt made (itself included). */
export const decide = (
  counts: { readonly fromAddress: number; readonly fromAnyAddress: number; readonly remainingMs: number },
  options: SignInGuardOptions
): { readonly _tag: "refuse"; readonly retryAfterSeconds: number } | { readonly _tag: "check"; readonly delayMs: number } => {
  const fromAddress = counts.fromAddress - 1
  const fromAnyAddress = counts.fromAnyAddress - 1
  if (fromAddress >= options.maxFailures) {
    return { _tag: "refuse", retryAfterSeconds: Math.max(1, Math.ceil(counts.remainingMs / 1000)) }
  }
  return {
    _tag: "check",
    delayMs: Math.max(
      delayAfter(fromAddress, options.freeFailures, options),
      delayAfter(fromAnyAddress, options.maxFailures, options)
    )
  }
}

/** Longer names, NUL and lone surrogates (which Postgres text cannot hold) are stored as a digest. */
const MAX_STORED_ACCOUNT = 256
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

const storedAccount = (account: string): string => {
  const name = account.toLowerCase()
  return name.length <= MAX_STORED_ACCOUNT && !UNSTORABLE.test(name)
    ? name
    : `sha256:${createHash("sha256").update(name).digest("hex")}`
}

const storedAddress = (address: string | undefined): string =>
  address === undefined || address === "" ? "unknown" : address.slice(0, 64)

export const makeSignInGuard = Effect.fnUntraced(function*(options: SignInGuardOptions) {
  const sql = yield* Sql
  const guard: SignInGuardService = {
    admit: (attempt) =>
      Effect.gen(function*() {
        const counts = yield* countAttempt(sql, storedAccount(attempt.account), storedAddress(attempt.address), options.windowMs)
        const decision = decide(counts, options)
        if (decision._tag === "refuse") {
          return yield* new RateLimited({
            retryAfterSeconds: decision.retryAfterSeconds,
            message: "too many failed sign-ins for this account from this address; try again later"
          })
        }
        if (decision.delayMs > 0) yield* Effect.sleep(decision.delayMs)
      }),
    succeeded: (attempt) =>
      clearAttempt(sql, storedAccount(attempt.account), storedAddress(attempt.address)).pipe(
        Effect.catchCause((cause) => Effect.logWarning("sign-in failures not cleared after a sign-in", cause))
      )
  }
  // Rows whose window ended no longer count; deleting them keeps the table at one window's worth.
  const period = Duration.millis(Math.min(options.windowMs, 60_000))
  yield* Effect.forkScoped(Effect.schedule(
    deleteExpired(sql, options.windowMs).pipe(Effect.catchCause((cause) => Effect.logWarning("sign-in failures cleanup failed", cause))),
    Schedule.spaced(period)
  ))
  return guard
})

const atLeast = (name: string, min: number, fallback: number) =>
  Config.Int(name).pipe(
    Config.mapEffect((n) =>
      n >= min
        ? Effect.succeed(n)
        : Effect.fail(new Config.ConfigError(new ConfigProvider.SourceError({ message: `${name}: must be an integer of at least ${min}, got ${n}` })))
    ),
    Config.withDefault(fallback)
  )

/** `SIGN_IN_WINDOW_SECONDS`, `SIGN_IN_MAX_FAILURES` and `SIGN_IN_DELAY_STEP_MS`. */
export const SignInGuardConfig = Config.all({
  windowSeconds: atLeast("SIGN_IN_WINDOW_SECONDS", 1, defaultSignInGuardOptions.windowMs / 1000),
  maxFailures: atLeast("SIGN_IN_MAX_FAILURES", 1, defaultSignInGuardOptions.maxFailures),
  delayStepMs: atLeast("SIGN_IN_DELAY_STEP_MS", 0, defaultSignInGuardOptions.delayStepMs)
})

export class SignInGuard extends Context.Service<SignInGuard, SignInGuardService>()("voltaic/auth/SignInGuard") {
  /** Store-backed: the counts are shared by every process on the same database. */
  static readonly layer = Layer.effect(
    SignInGuard,
    Effect.gen(function*() {
      const config = yield* SignInGuardConfig
      return yield* makeSignInGuard({
        ...defaultSignInGuardOptions,
        windowMs: config.windowSeconds * 1000,
        maxFailures: config.maxFailures,
        delayStepMs: config.delayStepMs
      })
    })
  )
}
