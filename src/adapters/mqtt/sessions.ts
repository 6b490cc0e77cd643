import { Aedes, type AuthenticateError, type Client, type PublishPacket } from "aedes"
import { Effect } from "effect"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import type { AuthService } from "../../auth/Auth.ts"
import type { Principal } from "../../auth/Principal.ts"
import { INGESTED_TOPIC } from "../../bus/topics.ts"
import type { CONNACK_BAD_USERNAME_OR_PASSWORD, CONNACK_IDENTIFIER_REJECTED, CONNACK_SERVER_UNAVAILABLE } from "./errors.ts"

/** What the broker knows of a connection and the credential it connected with. */
export interface Session {
  /** The MQTT username it connected with, re-checked when credentials change. */
  readonly credential: string
  principal: Principal
  /** When its recent publishes were refused (at most `MAX_REFUSALS`, oldest first). */
  readonly refusals: Array<number>
  /** Devices whose topics this session was allowed to subscribe to (deliveries are checked against it). */
  readonly watched: Set<string>
}

/**
 * What a log line about a connection carries as annotations (fields with `LOG_FORMAT=json`): the
 * client id, and once it authenticated, its principal and, for a device key, its device.
 */
export const connectionAnnotations = (client: { readonly id?: string | null }, session: Session | undefined): Record<string, string> => {
  const out: Record<string, string> = {}
  if (typeof client.id === "string") out.clientId = client.id
  if (session !== undefined) {
    out.principal = `${session.principal.kind}:${session.principal.id}`
    if (session.principal.kind === "device") out.deviceId = session.principal.id
  }
  return out
}

/** A principal as the owner of client ids: a user by user (any of its tokens), others by id. */
export const principalKey = (principal: Principal) => `${principal.kind}/${principal.organisationId}/${principal.id}`

/**
 * Devices that open connections here were allowed to subscribe to, counted by connection (a
 * session's `watched`, from when it is granted until the connection closes; never lowered by an
 * UNSUBSCRIBE, so a superset). A delivery of a device none of them watches has nobody to reach
 * through aedes (stored sessions are served before it, `SqlPersistence.deliver`), and skips
 * aedes's publish: a packet, a buffer and a topic match per stored event, for nobody.
 */
export class Watchers {
  readonly #connections = new Map<string, number>()

  has(deviceId: string): boolean {
    return this.#connections.has(deviceId)
  }

  add(deviceId: string): void {
    this.#connections.set(deviceId, (this.#connections.get(deviceId) ?? 0) + 1)
  }

  /** A connection closed: the devices it watched. */
  release(deviceIds: Iterable<string>): void {
    for (const deviceId of deviceIds) {
      const count = this.#connections.get(deviceId)
      if (count === undefined) continue
      if (count <= 1) this.#connections.delete(deviceId)
      else this.#connections.set(deviceId, count - 1)
    }
  }
}

/** The device a delivery's topic is about (`devices/{id}/…`). */
export const deliveryDevice = (topic: string): string | undefined => {
  if (!topic.startsWith("devices/")) return undefined
  const end = topic.indexOf("/", 8)
  return end === -1 ? undefined : topic.slice(8, end)
}

/**
 * aedes, except that a publish already ingested (re-routed to `INGESTED_TOPIC`) ends there: it
 * reached the store, and subscribers get the stored resource from the bus, so routing the raw
 * packet through the broker's emitter and offline queue would be work for nobody. aedes calls
 * `publish(packet, client, done)` for a client's publish, `publish(packet, done)` for its own.
 */
export class VoltaicAedes extends Aedes {
  override publish(packet: PublishPacket, client: Client | null | ((error?: Error) => void), done?: (error?: Error) => void): void {
    if (packet.topic === INGESTED_TOPIC) {
      const callback = typeof client === "function" ? client : done
      if (callback !== undefined) callback()
      return
    }
    // The base's declared signature names only its own two-argument form.
    Reflect.apply(Aedes.prototype.publish, this, [packet, client, done])
  }
}

/** Closes a connection after its cause was already logged (aedes reports it as a client error). */
export class AlreadyLogged extends Error {}

/** Where a connection comes from, read when it is accepted (a closed socket no longer says). */
export const describePeer = (connection: Duplex, request: IncomingMessage | undefined): string => {
  const socket = request?.socket ?? connection
  const address = "remoteAddress" in socket ? socket.remoteAddress : undefined
  const port = "remotePort" in socket ? socket.remotePort : undefined
  if (typeof address !== "string") return "memory"
  return typeof port === "number" ? `${address}:${port}` : address
}

export const authError = (
  returnCode: typeof CONNACK_SERVER_UNAVAILABLE | typeof CONNACK_BAD_USERNAME_OR_PASSWORD | typeof CONNACK_IDENTIFIER_REJECTED,
  message: string
) => {
  const error: AuthenticateError = Object.assign(new Error(message), { returnCode })
  return error
}

/**
 * Re-checks the credential of every live session against the store (after a credential
 * changed): a revoked token or rotated key closes the sessions it opened; the others take the
 * principal as it is now. Fails when the store did not answer, so `Auth` runs it again at its
 * next check.
 */
export const recheckSessions = (deps: {
  readonly auth: AuthService
  readonly live: ReadonlyMap<Client, Session>
  readonly sessions: WeakMap<Client, Session>
  readonly peer: (client: Client) => string
}) =>
  Effect.gen(function*() {
    const { auth, live, sessions, peer } = deps
    const byCredential = new Map<string, Array<Client>>()
    for (const [client, session] of live) {
      const clients = byCredential.get(session.credential)
      if (clients === undefined) byCredential.set(session.credential, [client])
      else clients.push(client)
    }
    yield* Effect.forEach(
      byCredential,
      ([credential, clients]) =>
        auth.authenticate(credential).pipe(
          Effect.matchEffect({
            onSuccess: (principal) =>
              Effect.sync(() => {
                for (const client of clients) {
                  const session = live.get(client)
                  if (session !== undefined) session.principal = principal
                }
              }),
            onFailure: (e) =>
              e._tag === "Unauthorized"
                ? Effect.forEach(clients, (client) =>
                  Effect.andThen(
                    Effect.logInfo(`mqtt session of ${peer(client)} closed: its credential was revoked or rotated`),
                    Effect.sync(() => {
                      // Its will, published as the connection closes, is refused with it.
                      sessions.delete(client)
                      client.close()
                    })
                  ), { discard: true })
                // Not re-checked: `Auth` runs this again at its next check of the store.
                : Effect.fail(e)
          })
        ),
      { concurrency: 8, discard: true }
    )
  })
