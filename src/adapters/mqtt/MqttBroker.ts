import { Aedes, type AedesOptions, type AuthenticateError, type Client, type PublishPacket, type Subscription } from "aedes"
import { Context, Duration, Effect, Exit, FiberSet, Layer, Option, Schedule } from "effect"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { Auth } from "../../auth/Auth.ts"
import type { Principal } from "../../auth/Principal.ts"
import { Bus } from "../../bus/Bus.ts"
import { INGESTED_TOPIC, subscriptionDevice } from "../../bus/topics.ts"
import { InvalidInput } from "../../domain/errors.ts"
import { Activity } from "../../ingest/Activity.ts"
import { Ingest, type IngestError } from "../../ingest/Ingest.ts"
import { Sql } from "../../store/Sql.ts"
import { CONNACK_BAD_USERNAME_OR_PASSWORD, CONNACK_SERVER_UNAVAILABLE, mqttRefusal } from "./errors.ts"
import { decode, type IngestRequest, ingestPublish } from "./publish.ts"

export interface MqttBrokerService {
  /** Serves one MQTT connection: a TCP socket, a WebSocket stream or an in-memory duplex. */
  handle(connection: Duplex, request?: IncomingMessage): void
}

/** Refused publishes a connection may make before it is closed ("disconnected on repeated abuse"). */
export const MAX_REFUSALS = 3

/**
 * While the store is behind (`Unavailable`), a publish is retried and its PUBACK delayed
 * rather than the message dropped; a store behind for this long closes the connection
 * unacknowledged, so the client sends the message again after reconnecting.
 */
const STORE_BEHIND_LIMIT = Duration.seconds(30)
const storeBehindRetry = Schedule.max([
  Schedule.min([Schedule.exponential("25 millis"), Schedule.spaced("1 second")]).pipe(Schedule.jittered),
  Schedule.during(STORE_BEHIND_LIMIT)
])

/** Device id → organisation, for subscription checks; devices never change organisation. */
const OWNER_CACHE_MAX = 100_000

interface Session {
  /** The MQTT username it connected with, re-checked when credentials change. */
  readonly credential: string
  principal: Principal
  refusals: number
}

/**
 * aedes, except that a publish already ingested (re-routed to `INGESTED_TOPIC`) ends there: it
 * reached the store, and subscribers get the stored resource from the bus, so routing the raw
 * packet through the broker's emitter and offline queue would be work for nobody. aedes calls
 * `publish(packet, client, done)` for a client's publish, `publish(packet, done)` for its own.
 */
class VoltaicAedes extends Aedes {
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
class AlreadyLogged extends Error {}

const remoteAddress = (client: Client): string => {
  const conn = client.conn
  const address = client.req?.socket.remoteAddress ?? ("remoteAddress" in conn ? conn.remoteAddress : undefined)
  return typeof address === "string" ? address : "memory"
}

const peer = (client: Client) => `client ${client.id ?? "(connecting)"} from ${remoteAddress(client)}`

const authError = (returnCode: typeof CONNACK_SERVER_UNAVAILABLE | typeof CONNACK_BAD_USERNAME_OR_PASSWORD, message: string) => {
  const error: AuthenticateError = Object.assign(new Error(message), { returnCode })
  return error
}

/**
 * The aedes broker: every hook goes through `Auth` and `Ingest`; nothing is decided here
 * beyond translating MQTT. Publishes are acknowledged only once stored, their raw packets
 * reach nobody, and subscribers receive what the bus delivers (the stored resource).
 */
export class MqttBroker extends Context.Service<MqttBroker, MqttBrokerService>()("voltaic/adapters/mqtt/MqttBroker") {
  static readonly layer = Layer.effect(
    MqttBroker,
    Effect.gen(function*() {
      const auth = yield* Auth
      const ingest = yield* Ingest
      const bus = yield* Bus
      const sql = yield* Sql
      // Optional: a broker without device watchers (tests) serves the same.
      const activity = Option.getOrUndefined(yield* Effect.serviceOption(Activity))
      const run = yield* FiberSet.makeRuntime<never>()

      /** Looked up by hooks, wills included (they run while the connection closes). */
      const sessions = new WeakMap<Client, Session>()
      /** Open connections with a session, for re-checking credentials. */
      const live = new Map<Client, Session>()
      const owners = new Map<string, string>()

      const authenticate: NonNullable<AedesOptions["authenticate"]> = (client, username, _password, done) =>
        run(
          auth.authenticate(username).pipe(
            Effect.matchEffect({
              onSuccess: (principal) =>
                // A device's CONNECT is a sign of life; the CONNACK waits while its actor's mailbox is full.
                (principal.kind === "device" && activity !== undefined
                  ? activity.offer({ organisationId: principal.organisationId, deviceId: principal.id, at: Date.now(), session: true })
                  : Effect.void).pipe(Effect.andThen(Effect.sync(() => {
                  const session: Session = { credential: username ?? "", principal, refusals: 0 }
                  sessions.set(client, session)
                  if (!client.conn.destroyed) {
                    live.set(client, session)
                    client.conn.once("close", () => live.delete(client))
                  }
                  done(null, true)
                }))),
              onFailure: (e) =>
                Effect.andThen(
                  Effect.logWarning(
                    `mqtt connect refused for ${peer(client)}: ${username ? e.message : "no credential: send the key as the MQTT username"}`
                  ),
                  Effect.sync(() =>
                    done(
                      e._tag === "SqlError"
                        ? authError(CONNACK_SERVER_UNAVAILABLE, "server unavailable")
                        : authError(CONNACK_BAD_USERNAME_OR_PASSWORD, e.message),
                      false
                    )
                  )
                )
            })
          )
        )

      /** An accepted publish goes on to aedes under a topic nobody can subscribe to. */
      const divert = (packet: PublishPacket) => {
        packet.topic = INGESTED_TOPIC
        packet.retain = false
      }

      /** An accepted publish goes on to aedes (its PUBACK) and ends there (`VoltaicAedes`). */
      const accept = (packet: PublishPacket, callback: (error: Error | null) => void) => {
        divert(packet)
        callback(null)
      }

      const refuse = (client: Client, session: Session, packet: PublishPacket, callback: (error: Error | null) => void) => (e: IngestError) => {
        const refusal = mqttRefusal(e)
        if (e._tag === "Unavailable" || e._tag === "SqlError") {
          // Not the client's fault: no PUBACK, so it sends the message again.
          return Effect.andThen(
            Effect.logWarning(
              `mqtt publish on ${packet.topic} from ${peer(client)} not stored (0x${refusal.reasonCode.toString(16)}): ${refusal.message}; closing the connection`
            ),
            Effect.sync(() => callback(new AlreadyLogged(refusal.message)))
          )
        }
        session.refusals += 1
        const abusive = session.refusals >= MAX_REFUSALS
        return Effect.andThen(
          Effect.logWarning(
            `mqtt publish on ${packet.topic} from ${peer(client)} refused (0x${refusal.reasonCode.toString(16)}): ${refusal.message}` +
              (abusive ? `; disconnecting after ${session.refusals} refusals` : "")
          ),
          // MQTT 3.1.1 cannot refuse a PUBLISH: acknowledge and drop it, or close [MQTT-3.3.5-2].
          Effect.sync(() => abusive ? callback(new AlreadyLogged(refusal.message)) : accept(packet, callback))
        )
      }

      const authorizePublish: NonNullable<AedesOptions["authorizePublish"]> = (client, packet, callback) => {
        const session = client === null ? undefined : sessions.get(client)
        // A will left by a session of an earlier process: nobody to act for.
        if (client === null || session === undefined) return callback(new AlreadyLogged("no session"))
        const request = decode(packet.topic, packet.payload)
        // The common case without a fiber; TCP holds the sender back (aedes reads a connection
        // on only once its publishes are answered), so the writer lets it wait in line.
        if (
          !(request instanceof InvalidInput) && request.kind === "event" &&
          ingest.submitEvent(
            { principal: session.principal, protocol: "mqtt", device: request.device, payload: request.input },
            (exit) =>
              Exit.isSuccess(exit)
                ? accept(packet, callback)
                : run(Effect.catch(exit, refuse(client, session, packet, callback))),
            true
          )
        ) return
        run(ingestSlowly(session, client, request).pipe(Effect.matchEffect({
          onSuccess: () => Effect.sync(() => accept(packet, callback)),
          onFailure: refuse(client, session, packet, callback)
        })))
      }

      /** Everything but the common case: lookups, refusals, and retries while the store is behind. */
      const ingestSlowly = (session: Session, client: Client, request: IngestRequest | InvalidInput): Effect.Effect<void, IngestError> =>
        request instanceof InvalidInput
          ? Effect.fail(request)
          : ingestPublish(ingest, session.principal, request).pipe(
            Effect.retry({ schedule: storeBehindRetry, while: (e) => e._tag === "Unavailable" && !client.closed })
          )

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
            Effect.logWarning(`mqtt subscription to ${subscription.topic} from ${peer(client)} refused: ${why}`),
            // A null subscription is answered 0x80 in the SUBACK [MQTT-3.9.3].
            Effect.sync(() => callback(null, null))
          )
        if (session === undefined) return run(refuse("no session"))
        if (deviceId === undefined) return run(refuse("not a device's events, locations or command runs"))
        run(
          mayWatch(session.principal, deviceId).pipe(
            Effect.matchEffect({
              onSuccess: (allowed) => {
                if (!allowed) return refuse(`device ${deviceId} is not this credential's`)
                // QoS 2 is held as 1 (aedes still echoes the QoS asked for in the SUBACK); deliveries
                // are published at QoS 1, so none is ever sent at 2.
                const granted: Subscription = { ...subscription, qos: subscription.qos === 2 ? 1 : subscription.qos }
                return Effect.sync(() => callback(null, granted))
              },
              onFailure: (e) => refuse(`store failed: ${e.message}`)
            })
          )
        )
      }

      const broker = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const broker = new VoltaicAedes({
            authenticate,
            authorizePublish,
            authorizeSubscribe,
            // 0 = no in-flight window in mqemitter. With a window, a commit releasing thousands of
            // emits behind a full window drained recursively and overflowed the stack
            // (bench:ingest, 5 of 9 runs, when ingested publishes were still emitted;
            // mcollina/mqemitter#204). A frozen subscriber is still dropped by `drainTimeout`.
            concurrency: 0,
            drainTimeout: 15_000
          })
          await broker.listen()
          return broker
        }),
        (broker) => Effect.callback<void>((resume) => broker.close(() => resume(Effect.void)))
      )

      const onClientError = (client: Client, error: Error) => {
        // Refusals were logged where they happened; errors after the close are its echo.
        if (error instanceof AlreadyLogged || client.closed) return
        run(Effect.logWarning(`mqtt connection of ${peer(client)} closed: ${error.message}`))
      }
      // A device's PINGREQ is a sign of life too (keep-alive of an otherwise quiet session).
      broker.on("ping", (_packet, client) => {
        const principal = sessions.get(client)?.principal
        if (principal?.kind === "device") activity?.publish({ organisationId: principal.organisationId, deviceId: principal.id, at: Date.now(), session: true })
      })
      broker.on("clientError", onClientError)
      broker.on("connectionError", onClientError)
      // Persistence failures; without a listener the EventEmitter would throw them.
      broker.addListener("error", (error: unknown) => run(Effect.logError("mqtt broker failed", error)))

      yield* bus.onDelivery((delivery) =>
        broker.publish(
          { cmd: "publish", topic: delivery.topic, payload: Buffer.from(delivery.payload), qos: 1, retain: false, dup: false },
          (error) => {
            if (error) run(Effect.logWarning(`mqtt delivery on ${delivery.topic} failed: ${error.message}`))
          }
        )
      )

      /** A revoked token or rotated key closes the sessions it opened. */
      const recheck = Effect.gen(function*() {
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
                    : Effect.logWarning(`mqtt sessions not re-checked after a credential change: ${e.message}`)
              })
            ),
          { concurrency: 8, discard: true }
        )
      })
      yield* auth.onCredentialsChanged(() => run(recheck))

      return MqttBroker.of({
        handle: (connection, request) => {
          broker.handle(connection, request)
        }
      })
    })
  )
}
