import type { AedesOptions, Client } from "aedes"
import { type Cause, Effect } from "effect"
import type { Principal } from "../../auth/Principal.ts"
import { subscriptionDevice } from "../../bus/topics.ts"
import type { SqlClient } from "../../store/Sql.ts"
import { printable } from "../logLine.ts"
import { isDropped } from "./guard.ts"
import { AlreadyLogged, connectionAnnotations, deliveryDevice, type Session, type Watchers } from "./sessions.ts"

/** Device id → organisation, for subscription checks; devices never change organisation. */
const OWNER_CACHE_MAX = 100_000

/**
 * Who may subscribe to what (a device to itself, an application or user to its organisation's
 * devices, on the topics of `subscriptionDevice`), and the check of every delivery against it.
 */
export const makeSubscriptions = (deps: {
  readonly sql: SqlClient
  readonly sessions: WeakMap<Client, Session>
  /** Open connections with a session: only theirs are counted in `watchers`. */
  readonly live: ReadonlyMap<Client, Session>
  readonly watchers: Watchers
  readonly run: (effect: Effect.Effect<void>) => unknown
  readonly peer: (client: Client) => string
  readonly defect: (client: Client, what: string, cause: Cause.Cause<unknown>, close: () => void) => Effect.Effect<void>
}) => {
  const { sql, sessions, live, watchers, run, peer, defect } = deps
  const owners = new Map<string, string>()

  const mayWatch = (principal: Principal, deviceId: string) => {
    if (principal.kind === "device") return Effect.succeed(principal.id === deviceId)
    if (principal.kind === "management") return Effect.succeed(false)
    const known = owners.get(deviceId)
    if (known !== undefined) return Effect.succeed(known === principal.organisationId)
    return sql.query<{ organisation_id: string }>("SELECT organisation_id FROM devices WHERE id = $1", [deviceId]).pipe(
      Effect.map(([row]) => {
        if (row === undefined) return false
        if (owners.size >= OWNER_CACHE_MAX) owners.clear()
        owners.set(deviceId, row.organisation_id)
        return row.organisation_id === principal.organisationId
      })
    )
  }

  const authorizeSubscribe: NonNullable<AedesOptions["authorizeSubscribe"]> = (client, subscription, callback) => {
    const session = sessions.get(client)
    const deviceId = subscriptionDevice(subscription.topic)
    const refuse = (why: string) =>
      Effect.andThen(
        Effect.logInfo(printable(`mqtt subscription to ${subscription.topic} from ${peer(client)} refused: ${why}`)).pipe(
          Effect.annotateLogs(connectionAnnotations(client, session))
        ),
        // A null subscription is answered 0x80 in the SUBACK [MQTT-3.9.3].
        Effect.sync(() => callback(null, null))
      )
    if (isDropped(subscription)) return callback(null, null)
    if (session === undefined) return run(refuse("no session"))
    if (deviceId === undefined) return run(refuse("not a device's events, locations or command runs"))
    run(
      mayWatch(session.principal, deviceId).pipe(
        Effect.matchEffect({
          onSuccess: (allowed) => {
            if (!allowed) return refuse(`device ${deviceId} is not this credential's`)
            // Granted as asked: QoS 2 was lowered to 1 as the packet was read (`guardConnection`).
            return Effect.sync(() => {
              if (!session.watched.has(deviceId)) {
                session.watched.add(deviceId)
                // Released when the connection closes; a connection already closed is not live.
                if (live.get(client) === session) watchers.add(deviceId)
              }
              callback(null, subscription)
            })
          },
          onFailure: (e) => refuse(`store failed: ${e.message}`)
        }),
        Effect.catchCause((cause) =>
          defect(client, `subscription to ${subscription.topic}`, cause, () => callback(new AlreadyLogged("defect"), null))
        )
      )
    )
  }

  /**
   * Every delivery, live or replayed from a persistent session's queue, goes only to a session
   * that was allowed to subscribe to its device: a subscription is checked once, and a queue
   * is kept for a client id, so this is what stops a queue reaching anyone else.
   */
  const authorizeForward: NonNullable<AedesOptions["authorizeForward"]> = (client, packet) => {
    const deviceId = deliveryDevice(packet.topic)
    return deviceId !== undefined && sessions.get(client)?.watched.has(deviceId) === true ? packet : null
  }

  /**
   * Forgets which organisation each device is of: run whenever credentials change (a deleted
   * device's key ends with it), so that a deleted device's topics are refused again, as an id
   * never seen is, rather than granted from memory.
   */
  const forgetOwners = () => owners.clear()

  return { authorizeSubscribe, authorizeForward, forgetOwners }
}
