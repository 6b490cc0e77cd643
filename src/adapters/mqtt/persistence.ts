import type { Client } from "aedes"
import type { AedesPacket } from "aedes-packet"
import MemoryPersistence from "aedes-persistence/asyncPersistence.js"
import { Effect, Schedule, type Scope } from "effect"
import { createHash } from "node:crypto"
import { Readable } from "node:stream"
import type { Bus, Delivery } from "../../bus/Bus.ts"
import { subscriptionDevice } from "../../bus/topics.ts"
import type { SqlClient } from "../../store/Sql.ts"
import * as store from "../../store/mqttSessions.ts"
import { deliveryDevice } from "./sessions.ts"

/** Deliveries one client id may have waiting (offline, or sent and not yet acknowledged). */
export const MAX_QUEUED_PER_CLIENT = 1_000

/** How often each process forgets old acknowledgements and re-reads which devices persistent sessions watch. */
const SWEEP_EVERY = "1 minute"

/** The key of a delivery's content, the same on every process: stored resources carry their own id, so two deliveries never share one. */
export const messageKey = (topic: string, payload: string | Buffer): string =>
  createHash("sha256").update(topic).update("\0").update(payload).digest("base64url").slice(0, 22)

export interface PersistenceOptions {
  readonly sql: SqlClient
  readonly bus: Bus["Service"]
  /** A queue at `MAX_QUEUED_PER_CLIENT`: the delivery was not kept for that client id. */
  readonly onFull: (clientId: string) => void
  /** The principal (`principalKey`) of a connection, and whether it may hold a subscription (it was authorised). */
  readonly principalOf: (client: Client) => string | undefined
  readonly mayKeep: (client: Client, topic: string) => boolean
  readonly run: (effect: Effect.Effect<void>) => unknown
}

const ask = <A>(effect: Effect.Effect<A, unknown>): Promise<A> => Effect.runPromise(effect)

/**
 * aedes's session store, with persistent sessions (clean session 0) in the shared store: a
 * client id's subscriptions and its QoS 1 deliveries, sent or not, until acknowledged. So a
 * session survives a restart and follows its client to another process. What is per
 * connection stays in memory (inherited): incoming QoS 2 packets (lowered to QoS 1 as they
 * are read, `guardConnection`), wills (published by the process holding the connection) and
 * retained messages (none: deliveries are never retained).
 *
 * Who queues: every process receives every delivery from the bus, and each queues it for the
 * stored sessions that match (`deliver`, before the delivery reaches aedes), keyed by its
 * content, so the copies of N processes collapse into one row (PRIMARY KEY (client_id,
 * message_key)) and an acknowledged row is kept a while so a late copy does not queue it again.
 * Chosen over "only the process that ingested it queues" because it needs no origin on the
 * bus, and a session connected on one process and one away are served by the same statement:
 * nothing falls between "online" and "offline" while a client moves. The cost is one
 * statement per process per delivery of a device that some persistent session watches; a
 * delivery of any other device (clean sessions: the common case) touches no SQL.
 */
export class SqlPersistence extends MemoryPersistence {
  /** Devices some stored session subscribes to at QoS 1 (a superset: stale entries cost one empty statement). */
  readonly watched = new Set<string>()
  /** Per device, the delivery being queued: deliveries of one device reach aedes in the order received [MQTT-4.6.0-5]. */
  readonly #pending = new Map<string, Promise<void>>()
  /** Connections that found no stored session under their client id (a clean CONNECT need not delete one). */
  readonly #unstored = new WeakSet<Client>()
  /** Whether the last delivery could not be queued (logged once until one is). */
  #failing = false
  /** Devices learnt while `refresh` reads, which its answer must not drop. */
  readonly #learning = new Set<(deviceIds: ReadonlyArray<string>) => void>()

  constructor(private readonly options: PersistenceOptions) {
    super()
  }

  /**
   * Queues `delivery` for the stored sessions it is for, then hands it to `publish` (aedes: live
   * subscribers, and a connected persistent session's send). Synchronous when no stored
   * session watches its device.
   */
  deliver(delivery: Delivery, publish: () => void): void {
    const { deviceId } = delivery
    const before = this.#pending.get(deviceId)
    if (before === undefined && !this.watched.has(deviceId)) return publish()
    const key = messageKey(delivery.topic, delivery.payload)
    const queued = (before ?? Promise.resolve()).then(() =>
      ask(store.enqueueDelivery(this.options.sql, { deviceId, topic: delivery.topic, payload: delivery.payload, key }, MAX_QUEUED_PER_CLIENT))
    ).then(
      (full) => {
        if (this.#failing) this.options.run(Effect.logInfo("mqtt: deliveries are kept for persistent sessions again"))
        this.#failing = false
        for (const clientId of full) this.options.onFull(clientId)
      },
      (error: unknown) => {
        // Once per failing spell: a lost store fails every delivery of a watched device.
        if (!this.#failing) {
          this.options.run(Effect.logWarning(
            `mqtt: deliveries are not kept for persistent sessions until the store answers (${delivery.topic}: ${String(error)})`
          ))
        }
        this.#failing = true
      }
    ).then(publish).catch((error: unknown) => {
      this.options.run(Effect.logError(`mqtt: delivery on ${delivery.topic} failed`, error))
    })
    this.#pending.set(deviceId, queued)
    void queued.finally(() => {
      if (this.#pending.get(deviceId) === queued) this.#pending.delete(deviceId)
    })
  }

  /** Reads which devices stored sessions watch (at start, then every `SWEEP_EVERY`), keeping those learnt meanwhile. */
  readonly refresh: Effect.Effect<void, unknown> = Effect.suspend(() => {
    const learnt = new Set<string>()
    const note = (deviceIds: ReadonlyArray<string>) => {
      for (const id of deviceIds) learnt.add(id)
    }
    this.#learning.add(note)
    return store.watchedDevices(this.options.sql).pipe(
      Effect.map((ids) => {
        this.watched.clear()
        for (const id of [...ids, ...learnt]) this.watched.add(id)
      }),
      Effect.ensuring(Effect.sync(() => this.#learning.delete(note)))
    )
  })

  /** Devices a stored session now watches, here or (through the bus) elsewhere. */
  learn(deviceIds: ReadonlyArray<string>): void {
    for (const id of deviceIds) this.watched.add(id)
    for (const note of this.#learning) note(deviceIds)
  }

  /**
   * Whether `principal` may use `clientId`: a stored session under it must be its own. A
   * persistent session claims the id; a clean one only checks it (and `cleanSubscriptions`
   * then ends the stored session).
   */
  claim(client: Client, clean: boolean, principal: string) {
    const { sql } = this.options
    return (clean ? store.sessionHolder(sql, client.id) : store.claimSession(sql, client.id, principal)).pipe(
      Effect.map((holder) => {
        if (holder === undefined) this.#unstored.add(client)
        return holder === undefined || holder === principal
      })
    )
  }

  override async addSubscriptions(client: Client, subs: Array<{ topic: string; qos: number }>): Promise<void> {
    const principal = this.options.principalOf(client)
    const kept: Array<store.StoredSubscription> = []
    for (const sub of subs) {
      const deviceId = subscriptionDevice(sub.topic)
      // aedes stores a SUBSCRIBE's every filter with each granted one: keep those granted.
      if (deviceId !== undefined && this.options.mayKeep(client, sub.topic)) kept.push({ topic: sub.topic, deviceId, qos: sub.qos })
    }
    if (principal === undefined || kept.length === 0) return
    const deviceIds = kept.filter((s) => s.qos > 0).map((s) => s.deviceId)
    this.learn(deviceIds)
    await ask(store.saveSubscriptions(this.options.sql, client.id, principal, kept))
    if (deviceIds.length > 0) this.options.run(this.options.bus.control({ type: "mqtt.subscribed", deviceIds }))
  }

  override async removeSubscriptions(client: Client, topics: Array<string>): Promise<void> {
    await ask(store.removeSubscriptions(this.options.sql, client.id, topics))
  }

  override async subscriptionsByClient(client: Pick<Client, "id">): Promise<Array<{ topic: string; qos: 0 | 1 | 2 }>> {
    const rows = await ask(store.subscriptionsOf(this.options.sql, client.id))
    return rows.map((r) => ({ topic: r.topic, qos: r.qos === 2 ? 2 : r.qos === 1 ? 1 : 0 }))
  }

  /** Empty: a delivery is queued for stored sessions before it reaches aedes (`deliver`). */
  override async subscriptionsByTopic(): Promise<Array<never>> {
    return []
  }

  override async countOffline(): Promise<{ subsCount: number; clientsCount: number }> {
    return { subsCount: 0, clientsCount: 0 }
  }

  /** A clean CONNECT ends the session stored under its client id [MQTT-3.1.2-6]. */
  override async cleanSubscriptions(client: Client): Promise<void> {
    if (this.#unstored.has(client)) return
    await ask(store.forgetSession(this.options.sql, client.id))
  }

  override async outgoingEnqueue(sub: { clientId: string }, packet: AedesPacket): Promise<void> {
    await this.outgoingEnqueueCombi([sub], packet)
  }

  override async outgoingEnqueueCombi(subs: Array<{ clientId: string }>, packet: AedesPacket): Promise<void> {
    if (subs.length === 0 || packet.cmd !== "publish") return
    const payload = packet.payload.toString()
    const full = await ask(store.enqueueFor(
      this.options.sql,
      subs.map((s) => s.clientId),
      { topic: packet.topic, payload, key: messageKey(packet.topic, payload), qos: packet.qos },
      MAX_QUEUED_PER_CLIENT
    ))
    for (const clientId of full) this.options.onFull(clientId)
  }

  /** A delivery to a connected persistent session is sent: remember its packet identifier. */
  override async outgoingUpdate(client: Client, packet: AedesPacket): Promise<void> {
    // A PUBREL (QoS 2 out) never happens: subscriptions are granted QoS 1 at most.
    if (packet.cmd !== "publish" || packet.messageId === undefined) return
    await ask(store.markSent(this.options.sql, client.id, messageKey(packet.topic, packet.payload), packet.messageId))
  }

  override async outgoingClearMessageId(client: Client, packet: AedesPacket): Promise<AedesPacket> {
    // A clean session keeps nothing: its PUBACKs (the hot path) never reach the store.
    const done = client.clean || packet.messageId === undefined
      ? undefined
      : await ask(store.acknowledge(this.options.sql, client.id, packet.messageId))
    // Like the base, `undefined` for a packet not held, whatever the declaration says.
    return (done === undefined ? undefined : { ...packet, topic: done.topic, payload: Buffer.from(done.payload) }) as AedesPacket
  }

  override outgoingStream(client: Client): Readable {
    if (client.clean) return Readable.from([])
    const { sql } = this.options
    return Readable.from((async function*() {
      for (const queued of await ask(store.queuedFor(sql, client.id))) {
        yield { cmd: "publish", topic: queued.topic, payload: Buffer.from(queued.payload), qos: queued.qos, retain: false, dup: false, messageId: queued.messageId }
      }
    })())
  }

  override getClientList(topic: string): Readable {
    const { sql } = this.options
    const deviceId = deliveryDevice(topic)
    return Readable.from((async function*() {
      if (deviceId !== undefined) yield* await ask(store.subscribersOf(sql, deviceId, topic))
    })())
  }
}

/**
 * The persistence of one broker: reads the watched devices before serving, hears of new ones
 * from the other processes, and every `SWEEP_EVERY` forgets old acknowledgements and re-reads
 * the watched devices (what a lost notice or an ended session changed).
 */
export const makePersistence = Effect.fnUntraced(function*(options: PersistenceOptions): Effect.fn.Return<SqlPersistence, never, Scope.Scope> {
  const persistence = new SqlPersistence(options)
  const logged = (what: string) => (effect: Effect.Effect<void, unknown>) =>
    Effect.catchCause(effect, (cause) => Effect.logWarning(`mqtt sessions: ${what} failed`, cause))
  yield* logged("reading the devices persistent sessions watch")(persistence.refresh)
  yield* options.bus.onControl((message) => {
    if (message.type === "mqtt.subscribed" && Array.isArray(message.deviceIds)) persistence.learn(message.deviceIds)
  })
  yield* Effect.forkScoped(
    Effect.repeat(
      Effect.andThen(
        logged("forgetting old acknowledgements")(store.sweepAcknowledged(options.sql)),
        logged("reading the devices persistent sessions watch")(persistence.refresh)
      ),
      Schedule.spaced(SWEEP_EVERY)
    ).pipe(Effect.delay(SWEEP_EVERY))
  )
  return persistence
})
