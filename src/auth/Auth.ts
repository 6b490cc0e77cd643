import { Context, Effect, Layer, type Scope } from "effect"
import { AppConfig } from "../config.ts"
import { Unauthorized } from "../domain/errors.ts"
import { secretKind } from "../domain/ids.ts"
import { Sql, type SqlError } from "../store/Sql.ts"
import { watchCredentials } from "./CredentialWatch.ts"
import type { Principal } from "./Principal.ts"
import { hashSecret } from "./secrets.ts"

/**
 * How long a resolved credential is trusted without asking the store again. A change to
 * credentials empties the cache of every process (`CredentialWatch`), so this only bounds
 * what a process may still accept while the store does not answer its change check.
 */
const CACHE_TTL_MS = 5_000
/**
 * A credential in use is looked up again this long before its entry ends, in the background,
 * its cached answer serving meanwhile: requests never wait on the lookup of a key they keep
 * using. Waiting, every request of an expiring key queued for the store each 5 s: on PGlite,
 * behind the group commit's statements, that made a REST command run's p99 39 ms instead of
 * 21 (bench:ingest command case).
 */
const REFRESH_AHEAD_MS = 1_000
const CACHE_MAX = 50_000

export interface AuthOptions {
  /** How long a resolved credential is trusted (default 5 s). */
  readonly ttlMs?: number
  /** How long before its end an entry in use is looked up again (default 1 s). */
  readonly refreshAheadMs?: number
}

export interface AuthService {
  /** The only place a credential is read: bearer, `access_token`, `x-app-key`, MQTT username, CoAP `accessToken`. */
  authenticate(secret: string | undefined): Effect.Effect<Principal, Unauthorized | SqlError>
  /**
   * A credential was revoked, rotated or deleted (call it once the change committed): this
   * process drops its cached credentials and runs its `onCredentialsChanged` listeners at once,
   * and the others do as soon as they see the change (bus notice, or the store's change counter).
   */
  forget(): Effect.Effect<void>
  /**
   * Run in every process after any change to credentials in the store, until the scope closes
   * (live MQTT sessions re-check theirs). A failure (the store did not answer) runs it again
   * at the next check.
   */
  onCredentialsChanged(listener: Effect.Effect<void, SqlError>): Effect.Effect<void, never, Scope.Scope>
}

const missing = new Unauthorized({ message: "not authenticated: send Authorization: Bearer <key>" })
const unknown = new Unauthorized({ message: "not authenticated: the credential is unknown, expired or revoked" })

export class Auth extends Context.Service<Auth, AuthService>()("voltaic/auth/Auth") {
  static readonly layerWith = ({ ttlMs = CACHE_TTL_MS, refreshAheadMs = REFRESH_AHEAD_MS }: AuthOptions) => Layer.effect(
    Auth,
    Effect.gen(function*() {
      const sql = yield* Sql
      const config = yield* AppConfig
      const cache = new Map<string, { principal: Principal; until: number }>()
      /** Secrets being looked up again ahead of their entry's end. */
      const refreshing = new Set<string>()
      const listeners = new Set<Effect.Effect<void, SqlError>>()
      /** How many credential changes this process has applied. */
      let changes = 0
      const changed = () => {
        changes += 1
        cache.clear()
      }
      const watch = yield* watchCredentials({
        every: config.credentialCheckInterval,
        apply: Effect.suspend(() => {
          changed()
          return Effect.forEach(listeners, (listener) => listener, { discard: true })
        })
      })

      /** A principal, and for expiring tokens when they expire (the cache must not outlive it). */
      const lookup = (kind: string, hash: string): Effect.Effect<(Principal & { expiresAt?: number }) | undefined, SqlError> => {
        switch (kind) {
          case "a_sk":
            return sql.query(
              `SELECT k.id, k.organisation_id, k.read_only, o.is_platform
               FROM api_keys k JOIN organisations o ON o.id = k.organisation_id WHERE k.secret_hash = $1`,
              [hash]
            ).pipe(Effect.map(([row]) =>
              row && {
                kind: "app" as const,
                id: String(row.id),
                organisationId: String(row.organisation_id),
                readOnly: row.read_only === true,
                platform: row.is_platform === true
              }
            ))
          case "d_sk":
            return sql.query("SELECT id, organisation_id FROM devices WHERE secret_hash = $1", [hash]).pipe(
              Effect.map(([row]) => row && { kind: "device" as const, id: String(row.id), organisationId: String(row.organisation_id) })
            )
          case "u_at":
            return sql.query(
              `SELECT t.id AS token_id, t.user_id, t.organisation_id, t.organisation_user_id, t.scope, t.expires_at,
                      ou.is_admin, u.email_address, u.is_platform_admin
               FROM user_tokens t
               JOIN organisation_users ou ON ou.id = t.organisation_user_id
               JOIN users u ON u.id = t.user_id
               WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.expires_at > $2`,
              [hash, Date.now()]
            ).pipe(Effect.map(([row]) =>
              row && {
                kind: "user" as const,
                id: String(row.user_id),
                tokenId: String(row.token_id),
                organisationId: String(row.organisation_id),
                organisationUserId: String(row.organisation_user_id),
                emailAddress: String(row.email_address),
                isAdmin: row.is_admin === true,
                platform: row.is_platform_admin === true,
                scope: String(row.scope),
                expiresAt: Number(row.expires_at)
              }
            ))
          case "m_at":
            return sql.query(
              "SELECT client_id, organisation_id, expires_at FROM management_tokens WHERE token_hash = $1 AND expires_at > $2",
              [hash, Date.now()]
            ).pipe(Effect.map(([row]) =>
              row && {
                kind: "management" as const,
                id: String(row.client_id),
                organisationId: String(row.organisation_id),
                expiresAt: Number(row.expires_at)
              }
            ))
          default:
            return Effect.succeed(undefined)
        }
      }

      // Suspended: the cache is read when the effect runs, not when it is built (a caller may
      // build it before a wait, as a held-back CONNECT does, and a change may come meanwhile).
      const authenticate = (secret: string | undefined): Effect.Effect<Principal, Unauthorized | SqlError> =>
        Effect.suspend(() => authenticateNow(secret))

      const authenticateNow = (secret: string | undefined): Effect.Effect<Principal, Unauthorized | SqlError> => {
        if (secret === undefined || secret.trim() === "") return Effect.fail(missing)
        const kind = secretKind(secret)
        if (kind === undefined) return Effect.fail(unknown)
        // Keyed by the secret itself: a hit costs no sha256 (the secret is in this process's
        // memory while its request is served anyway, and the entry lives seconds).
        const now = Date.now()
        const hit = cache.get(secret)
        if (hit !== undefined && hit.until > now) {
          if (hit.until - now > refreshAheadMs || refreshing.has(secret)) return Effect.succeed(hit.principal)
          refreshing.add(secret)
          return Effect.as(Effect.forkDetach(refresh(secret, kind, hit, now)), hit.principal)
        }
        return resolve(secret, kind, hashSecret(secret), now)
      }

      /**
       * Looks an entry in use up again: a credential found is cached anew; one gone (revoked,
       * expired) leaves the cache, so the next request is refused; a store error leaves the entry
       * to end on its own.
       */
      const refresh = (secret: string, kind: string, hit: { readonly until: number }, now: number) =>
        resolve(secret, kind, hashSecret(secret), now).pipe(
          Effect.catchTag("Unauthorized", () =>
            Effect.sync(() => {
              if (cache.get(secret) === hit) cache.delete(secret)
            })),
          Effect.ensuring(Effect.sync(() => refreshing.delete(secret))),
          Effect.ignore
        )

      const resolve = (secret: string, kind: string, hash: string, now: number): Effect.Effect<Principal, Unauthorized | SqlError> => {
        const seen = changes
        return lookup(kind, hash).pipe(
          Effect.flatMap((found) => {
            // A change was applied while it was looked up: the answer may predate it, and the
            // sessions re-checked by that change may not include this one yet.
            if (changes !== seen) return resolve(secret, kind, hash, now)
            if (found === undefined) return Effect.fail(unknown)
            const { expiresAt, ...principal } = found
            if (cache.size >= CACHE_MAX) cache.clear()
            cache.set(secret, { principal, until: Math.min(now + ttlMs, expiresAt ?? Infinity) })
            return Effect.succeed(principal)
          })
        )
      }

      return Auth.of({
        authenticate,
        // Cleared before answering: the request that revoked must already see it revoked.
        forget: () => Effect.andThen(Effect.sync(changed), watch.changedHere),
        onCredentialsChanged: (listener) =>
          Effect.acquireRelease(Effect.sync(() => listeners.add(listener)), () => Effect.sync(() => listeners.delete(listener))).pipe(
            Effect.asVoid
          )
      })
    })
  )

  static readonly layer = Auth.layerWith({})
}
