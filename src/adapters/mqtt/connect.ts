import type { AedesOptions, Client } from "aedes"
import { type Cause, type Context, Duration, Effect, Schedule } from "effect"
import type { AuthService } from "../../auth/Auth.ts"
import type { Principal } from "../../auth/Principal.ts"
import type { Activity } from "../../ingest/Activity.ts"
import type { ClientIds } from "./clientIds.ts"
import { CONNACK_BAD_USERNAME_OR_PASSWORD, CONNACK_IDENTIFIER_REJECTED, CONNACK_SERVER_UNAVAILABLE } from "./errors.ts"
import type { SqlPersistence } from "./persistence.ts"
import { authError, connectionAnnotations, principalKey, type Session, type Watchers } from "./sessions.ts"

/**
 * While the store is behind (`Unavailable`), a publish is retried and its PUBACK delayed
 * rather than the message dropped; a store behind for this long closes the connection
 * unacknowledged, so the client sends the message again after reconnecting. A CONNECT waits
 * as long for a store it cannot reach.
 */
const STORE_BEHIND_LIMIT = Duration.seconds(30)
export const storeBehindRetry = Schedule.max([
  Schedule.min([Schedule.exponential("25 millis"), Schedule.spaced("1 second")]).pipe(Schedule.jittered),
  Schedule.during(STORE_BEHIND_LIMIT)
])

/**
 * aedes's `authenticate`: the credential through `Auth`, then the client id — a live
 * connection of another principal here, or a session another principal stored under it,
 * refuses the CONNECT; an accepted one holds the id (`ClientIds`).
 */
export const makeAuthenticate = (deps: {
  readonly auth: AuthService
  readonly activity: Context.Service.Shape<typeof Activity> | undefined
  readonly clientIds: ClientIds
  readonly persistence: SqlPersistence
  readonly sessions: WeakMap<Client, Session>
  /** Open connections with a session, for re-checking credentials. */
  readonly live: Map<Client, Session>
  /** Devices the live connections watch: released when a connection closes. */
  readonly watchers: Watchers
  readonly run: (effect: Effect.Effect<void>) => unknown
  readonly peer: (client: Client) => string
  readonly defect: (client: Client, what: string, cause: Cause.Cause<unknown>, close: () => void) => Effect.Effect<void>
}): NonNullable<AedesOptions["authenticate"]> => {
  const { auth, activity, clientIds, sessions, live, watchers, run, peer, defect } = deps
  const whileStoreBehind = (client: Client) => ({
    schedule: storeBehindRetry,
    while: (e: { readonly _tag: string }) => e._tag === "SqlError" && !client.conn.destroyed
  })

  /**
   * A CONNECT's credential. A lost store holds the CONNACK back (as it holds a PUBACK) rather
   * than refusing at once: mqtt.js, by default, stops reconnecting after a refused CONNECT.
   */
  const credential = (client: Client, username: string | undefined) => Effect.retry(auth.authenticate(username), whileStoreBehind(client))

  type Done = Parameters<NonNullable<AedesOptions["authenticate"]>>[3]
  const admit = (client: Client, username: string | undefined, principal: Principal, done: Done) => {
    const key = principalKey(principal)
    const refuse = Effect.andThen(
      Effect.logInfo(`mqtt connect refused for ${peer(client)}: the client id belongs to another credential's session`).pipe(
        Effect.annotateLogs(connectionAnnotations(client, undefined))
      ),
      Effect.sync(() => done(authError(CONNACK_IDENTIFIER_REJECTED, "client id in use by another credential"), false))
    )
    // Taking another principal's client id over would close that session and hand this one its queued deliveries.
    if (clientIds.heldByOther(client.id, key)) return refuse
    return Effect.retry(deps.persistence.claim(client, client.clean, key), whileStoreBehind(client)).pipe(
      Effect.flatMap((own) =>
        own
          ? Effect.sync(() => {
            const session: Session = { credential: username ?? "", principal, refusals: [], watched: new Set() }
            sessions.set(client, session)
            if (client.conn.destroyed) return done(null, true)
            live.set(client, session)
            client.conn.once("close", () => {
              live.delete(client)
              watchers.release(session.watched)
            })
            clientIds.hold(client, key)
            done(null, true)
          })
          : refuse
      )
    )
  }

  return (client, username, _password, done) =>
    // A CONNECT that closed its connection as it was read (`guardConnection`) was logged there.
    client.conn.destroyed ? done(authError(CONNACK_BAD_USERNAME_OR_PASSWORD, "connection closed"), false) : run(
      credential(client, username).pipe(
        // A device's CONNECT is a sign of life; the CONNACK waits while its actor's mailbox is
        // full. A change applied meanwhile re-checks only the sessions registered, not this
        // one, so the credential is asked for again (from the cache, unless it changed).
        Effect.flatMap((principal) =>
          principal.kind === "device" && activity !== undefined
            ? Effect.andThen(
              activity.offer({ organisationId: principal.organisationId, deviceId: principal.id, at: Date.now(), session: true }),
              credential(client, username)
            )
            : Effect.succeed(principal)
        ),
        Effect.flatMap((principal) => admit(client, username, principal, done)),
        Effect.matchEffect({
          onSuccess: () => Effect.void,
          onFailure: (e) =>
            Effect.andThen(
              // The client's credential: info; the store's failure: a warning.
              (e._tag === "SqlError" ? Effect.logWarning : Effect.logInfo)(
                `mqtt connect refused for ${peer(client)}: ${username ? e.message : "no credential: send the key as the MQTT username"}`
              ).pipe(Effect.annotateLogs(connectionAnnotations(client, undefined))),
              Effect.sync(() =>
                done(
                  e._tag === "SqlError"
                    ? authError(CONNACK_SERVER_UNAVAILABLE, "server unavailable")
                    : authError(CONNACK_BAD_USERNAME_OR_PASSWORD, e.message),
                  false
                )
              )
            )
        }),
        Effect.catchCause((cause) =>
          defect(client, "connect", cause, () => done(authError(CONNACK_SERVER_UNAVAILABLE, "server unavailable"), false))
        )
      )
    )
}
