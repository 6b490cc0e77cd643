import type { AedesOptions, Client, PublishPacket } from "aedes"
import { Cause, Context, Duration, Effect, Exit, FiberSet, Layer, Option } from "effect"
import { randomUUID } from "node:crypto"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { Auth } from "../../auth/Auth.ts"
import { Bus } from "../../bus/Bus.ts"
import { INGESTED_TOPIC, subscriptionDevice } from "../../bus/topics.ts"
import { InvalidInput } from "../../domain/errors.ts"
import { retryFailed } from "../../domain/retry.ts"
import { Activity } from "../../ingest/Activity.ts"
import { Ingest, type IngestError } from "../../ingest/Ingest.ts"
import { Sql } from "../../store/Sql.ts"
import { printable } from "../logLine.ts"
import { makeClientIds } from "./clientIds.ts"
import { makeAuthenticate, storeBehindRetry } from "./connect.ts"
import { mqttRefusal } from "./errors.ts"
import { guardConnection, isDropped, MAX_PACKET_BYTES, MAX_PACKET_BYTES_UNAUTHENTICATED } from "./guard.ts"
import { makePersistence } from "./persistence.ts"
import { onceQos2 } from "./qos2.ts"
import { decode, type IngestRequest, ingestPublish } from "./publish.ts"
import { AlreadyLogged, connectionAnnotations, describePeer, principalKey, recheckSessions, type Session, VoltaicAedes, Watchers } from "./sessions.ts"
import { makeSubscriptions } from "./subscriptions.ts"
import { live as liveMetrics } from "../../metrics.ts"

export interface MqttBrokerService {
  /** Serves one MQTT connection: a TCP socket, a WebSocket stream or an in-memory duplex. */
  handle(connection: Duplex, request?: IncomingMessage): void
}

/**
 * Refused publishes a connection may make within `REFUSAL_WINDOW` before it is closed
 * ("disconnected on repeated abuse"); older refusals are forgiven.
 */
export const MAX_REFUSALS = 3
export const REFUSAL_WINDOW = Duration.seconds(60)

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
      const addresses = new WeakMap<Client, string>()
      // The client id is the peer's to choose: kept to one line.
      const peer = (client: Client) => printable(`client ${client.id ?? "(connecting)"} from ${addresses.get(client) ?? "memory"}`)
      /** Open connections with a session, for re-checking credentials. */
      const live = new Map<Client, Session>()
      const watchers = new Watchers()

      /**
       * A defect while serving one connection (a bug of ours, whatever the input) is logged with
       * its cause and closes that connection; it never reaches aedes, whose hooks would throw it
       * out of the process.
       */
      const defect = (client: Client, what: string, cause: Cause.Cause<unknown>, close: () => void) =>
        Effect.andThen(
          Cause.hasInterruptsOnly(cause)
            ? Effect.void
            : Effect.logError(printable(`mqtt ${what} from ${peer(client)} failed; closing the connection`), cause).pipe(
              Effect.annotateLogs(connectionAnnotations(client, sessions.get(client)))
            ),
          Effect.sync(close)
        )

      /** This broker on the bus (aedes's id): a client id connecting here closes its connection elsewhere. */
      const brokerId = randomUUID()
      const clientIds = yield* makeClientIds({ bus, brokerId, run, peer })
      const persistence = yield* makePersistence({
        sql,
        bus,
        run,
        onFull: clientIds.full,
        principalOf: (client) => {
          const principal = sessions.get(client)?.principal
          return principal === undefined ? undefined : principalKey(principal)
        },
        mayKeep: (client, topic) => {
          const deviceId = subscriptionDevice(topic)
          return deviceId !== undefined && sessions.get(client)?.watched.has(deviceId) === true
        }
      })
      const authenticate = makeAuthenticate({ auth, activity, clientIds, persistence, sessions, live, watchers, run, peer, defect })

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

      /** Connections already closing because a publish of theirs could not be stored. */
      const notStored = new WeakSet<Client>()

      const refuse = (client: Client, session: Session, packet: PublishPacket, callback: (error: Error | null) => void) => (e: IngestError) =>
        refuseUnannotated(client, session, packet, callback)(e).pipe(Effect.annotateLogs(connectionAnnotations(client, session)))
      const refuseUnannotated = (client: Client, session: Session, packet: PublishPacket, callback: (error: Error | null) => void) => (e: IngestError) => {
        const refusal = mqttRefusal(e)
        if (e._tag === "Unavailable" || e._tag === "SqlError") {
          // Not the client's fault: no PUBACK, so it sends the message again. Logged once per
          // connection: its other publishes waiting on the same lost store follow it.
          if (notStored.has(client)) return Effect.sync(() => callback(new AlreadyLogged(refusal.message)))
          notStored.add(client)
          return Effect.andThen(
            Effect.logWarning(
              printable(
                `mqtt publish on ${packet.topic} from ${peer(client)} not stored (0x${refusal.reasonCode.toString(16)}): ${refusal.message}; closing the connection`
              )
            ),
            Effect.sync(() => callback(new AlreadyLogged(refusal.message)))
          )
        }
        const now = Date.now()
        const recent = session.refusals
        while (recent.length > 0 && recent[0] <= now - Duration.toMillis(REFUSAL_WINDOW)) recent.shift()
        recent.push(now)
        const abusive = recent.length >= MAX_REFUSALS
        // The client's fault (invalid, unknown, forbidden, too large): info.
        return Effect.andThen(
          Effect.logInfo(
            printable(
              `mqtt publish on ${packet.topic} from ${peer(client)} refused (0x${refusal.reasonCode.toString(16)}): ${refusal.message}` +
                (abusive ? `; disconnecting after ${recent.length} refusals within ${Duration.format(REFUSAL_WINDOW)}` : "")
            )
          ),
          // MQTT 3.1.1 cannot refuse a PUBLISH: acknowledge and drop it, or close [MQTT-3.3.5-2].
          Effect.sync(() => abusive ? callback(new AlreadyLogged(refusal.message)) : accept(packet, callback))
        )
      }

      const qos2 = onceQos2(persistence, brokerId)

      const authorizePublish: NonNullable<AedesOptions["authorizePublish"]> = (client, packet, callback) => {
        const session = client === null ? undefined : sessions.get(client)
        // A will left by a session of an earlier process: nobody to act for. A publish whose
        // topic closed the connection (`guardConnection`, already logged) is not acted on.
        if (client === null || session === undefined) return callback(new AlreadyLogged("no session"))
        if (isDropped(packet)) return callback(new AlreadyLogged("closed"))
        // QoS 0 and 1 (nearly all) straight on, without the closures the QoS 2 check takes.
        if (packet.qos !== 2 || packet.messageId === undefined) return authorizeOnce(client, session, packet, callback)
        qos2(client, packet.messageId, packet, callback, (done) => accept(packet, done), (done) => authorizeOnce(client, session, packet, done))
      }

      const authorizeOnce = (client: Client, session: Session, packet: PublishPacket, callback: (error: Error | null) => void) => {
        const closeUnacknowledged = () => callback(new AlreadyLogged("defect"))
        const what = `publish on ${packet.topic}`
        let request: IngestRequest | InvalidInput
        try {
          request = decode(packet.topic, packet.payload)
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
        } catch (error) {
          return run(defect(client, what, Cause.die(error), closeUnacknowledged))
        }
        run(ingestSlowly(session, client, request).pipe(Effect.matchCauseEffect({
          onSuccess: () => Effect.sync(() => accept(packet, callback)),
          onFailure: (cause) => {
            const failure = cause.reasons.find(Cause.isFailReason)
            return failure !== undefined
              ? refuse(client, session, packet, callback)(failure.error)
              : defect(client, what, cause, closeUnacknowledged)
          }
        })))
      }

      /** Everything but the common case: lookups, refusals, and retries while the store is behind. */
      const ingestSlowly = (session: Session, client: Client, request: IngestRequest | InvalidInput): Effect.Effect<void, IngestError> =>
        request instanceof InvalidInput
          ? Effect.fail(request)
          : retryFailed(ingestPublish(ingest, session.principal, request), {
            schedule: storeBehindRetry,
            while: (e) => e._tag === "Unavailable" && !client.closed
          })

      const { authorizeSubscribe, authorizeForward, forgetOwners } = makeSubscriptions({ sql, sessions, live, watchers, run, peer, defect })

      const broker = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const broker = new VoltaicAedes({
            id: brokerId,
            persistence,
            authenticate,
            authorizePublish,
            authorizeSubscribe,
            authorizeForward,
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

      // Read at each scrape of /metrics. aedes keeps its connected clients by id, each with its
      // subscriptions by topic filter (neither is in its typings).
      const internals = broker as unknown as { readonly clients: Record<string, { readonly subscriptions: object }> }
      const gauges = {
        connections: () => broker.connectedClients,
        subscriptions: () => {
          let n = 0
          for (const id in internals.clients) n += Object.keys(internals.clients[id].subscriptions).length
          return n
        }
      }
      yield* Effect.acquireRelease(Effect.sync(() => liveMetrics.mqtt.add(gauges)), () => Effect.sync(() => liveMetrics.mqtt.delete(gauges)))

      const onClientError = (client: Client, error: Error) => {
        // Refusals were logged where they happened; errors after the close are its echo.
        if (error instanceof AlreadyLogged || client.closed) return
        run(Effect.logWarning(`mqtt connection of ${peer(client)} closed: ${error.message}`).pipe(
          Effect.annotateLogs(connectionAnnotations(client, sessions.get(client)))
        ))
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
        persistence.deliver(delivery, () => {
          // No connection here watches the device (the common case for a stored event).
          if (!watchers.has(delivery.deviceId)) return
          broker.publish(
            { cmd: "publish", topic: delivery.topic, payload: Buffer.from(delivery.payload), qos: 1, retain: false, dup: false },
            (error) => {
              if (error) run(Effect.logWarning(`mqtt delivery on ${delivery.topic} failed: ${error.message}`))
            }
          )
        })
      )

      const recheck = recheckSessions({ auth, live, sessions, peer })
      yield* auth.onCredentialsChanged(recheck)
      yield* auth.onCredentialsChanged(Effect.sync(forgetOwners))

      return MqttBroker.of({
        handle: (connection, request) => {
          const client = broker.handle(connection, request)
          addresses.set(client, describePeer(connection, request))
          const guarded = guardConnection(client, {
            maxBytes: () => sessions.has(client) ? MAX_PACKET_BYTES : MAX_PACKET_BYTES_UNAUTHENTICATED,
            onViolation: (reason) =>
              run(Effect.logInfo(`mqtt connection of ${peer(client)} closed: ${reason}`).pipe(
                Effect.annotateLogs(connectionAnnotations(client, sessions.get(client)))
              ))
          })
          if (!guarded) {
            run(Effect.logError("mqtt connection refused: this aedes has no parser to guard (see src/adapters/mqtt/guard.ts)"))
            connection.destroy()
          }
        }
      })
    })
  )
}
