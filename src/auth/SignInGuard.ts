import { Context, Effect, Layer } from "effect"
import { RateLimited } from "../domain/errors.ts"

/**
 * Failed sign-ins per account and per address: the first few are answered at once, then each
 * is slowed, then refused with 429 until the window passes. In memory, per process: a
 * cluster multiplies the allowance by its size, which still stops guessing at scale.
 */
export interface SignInGuardOptions {
  readonly windowMs: number
  /** Failures answered without delay. */
  readonly freeFailures: number
  /** Failures after which attempts are refused (429). */
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

export interface SignInGuardService {
  /** Before checking a password: waits when slowed, fails with 429 when locked out. */
  admit(keys: ReadonlyArray<string>): Effect.Effect<void, RateLimited>
  failed(keys: ReadonlyArray<string>): Effect.Effect<void>
  succeeded(keys: ReadonlyArray<string>): Effect.Effect<void>
}

export const makeSignInGuard = (options: SignInGuardOptions = defaultSignInGuardOptions): SignInGuardService => {
  const failures = new Map<string, { count: number; since: number }>()
  const current = (key: string, now: number) => {
    const entry = failures.get(key)
    if (entry === undefined || now - entry.since > options.windowMs) return undefined
    return entry
  }
  return {
    admit: (keys) =>
      Effect.suspend(() => {
        const now = Date.now()
        const worst = keys.map((k) => current(k, now)).reduce<{ count: number; since: number } | undefined>(
          (a, b) => (b !== undefined && (a === undefined || b.count > a.count) ? b : a),
          undefined
        )
        if (worst === undefined || worst.count < options.freeFailures) return Effect.void
        if (worst.count >= options.maxFailures) {
          const retryAfterSeconds = Math.max(1, Math.ceil((worst.since + options.windowMs - now) / 1000))
          return Effect.fail(new RateLimited({ retryAfterSeconds, message: "too many failed sign-ins; try again later" }))
        }
        const delay = Math.min(options.maxDelayMs, (worst.count - options.freeFailures + 1) * options.delayStepMs)
        return Effect.sleep(delay)
      }),
    failed: (keys) =>
      Effect.sync(() => {
        const now = Date.now()
        for (const key of keys) {
          const entry = current(key, now)
          failures.set(key, entry === undefined ? { count: 1, since: now } : { count: entry.count + 1, since: entry.since })
        }
        if (failures.size > 100_000) failures.clear()
      }),
    succeeded: (keys) => Effect.sync(() => keys.forEach((key) => failures.delete(key)))
  }
}

export class SignInGuard extends Context.Service<SignInGuard, SignInGuardService>()("voltaic/auth/SignInGuard") {
  static readonly layer = Layer.sync(SignInGuard, () => makeSignInGuard())
}
