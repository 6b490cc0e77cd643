import { Clock, Context, Deferred, Effect, Layer, Queue, Schedule } from "effect"
import { Bus } from "../bus/Bus.ts"
import { Activity, type DeviceActivity } from "../ingest/Activity.ts"
import { touchDevices } from "../store/devices.ts"
import { Sql } from "../store/Sql.ts"
import { bucketOf, DeviceBucket, type Sign } from "./protocol.ts"
import { Rules, watchesEvent } from "./rules.ts"

/**
 * Committed signs of life on their way to the owners of their devices, wherever they run:
 * grouped by bucket, one `Seen` per bucket at a time and at most one per SPACING_MS, never
 * awaited by ingest.
 *
 * - `Seen` is volatile: every sign it carries is already in `device_seen.last_seen_at` (an event
 *   or location sets it in its own commit; a session sign is stored here first), and a bucket
 *   reads that row when it activates a device and before it declares one offline. A lost
 *   `Seen` (owner down, handover) costs at most a late rule evaluation of its events.
 * - Bounded: while a bucket's `Seen` is on its way, what comes for that bucket is folded in,
 *   one entry per device (its newest time, and at most MAX_EVENTS events for rule evaluation;
 *   beyond that the oldest evaluations are dropped, and counted in a warning). Event data no
 *   rule looks at (rules known here) is not carried at all.
 * - MQTT CONNECT and PINGREQ signs stored nothing: they are stored here, batched
 *   (`touchDevices`), before they are sent. `offer` (a CONNECT) waits until its sign is stored.
 */

const MAX_EVENTS = 64
/**
 * A bucket is sent at most once per SPACING_MS: under load, what comes for it meanwhile is folded
 * into its next message, which bounds the messages (and their cost) to one per bucket
 * (`BUCKETS`) per spacing whatever the event rate. A bucket idle for as long is sent at once.
 * With 1,000 devices spread over ~630 of 1,024 buckets, 100 ms meant about a message per 1.5
 * events: bench:ingest QoS 1 measured 94 µs of server CPU per event (9,273 events/s, ×0.80 of the
 * peer's); 250 ms, 78 µs (10,917/s). The price: under load a sign reaches its owner (threshold
 * rules) up to 250 ms later.
 */
const SPACING_MS = 250
/** `Seen` messages on their way at once (one per bucket at most). */
const SENDERS = 32
/**
 * A bucket that does not answer by then (its owner hangs) is sent its signs again: a time not
 * newer than the device's is ignored and an event's alert is keyed, but an anomaly baseline may
 * count that event twice.
 */
const SEND_TIMEOUT = "30 seconds"
const RETRY_AFTER = "200 millis"
const STORE_RETRY = Schedule.min([Schedule.exponential("50 millis"), Schedule.spaced("5 seconds")])

type SeenEvent = NonNullable<Sign["event"]>

interface Pending {
  readonly organisationId: string
  at: number
  events: Array<{ readonly at: number; readonly event: SeenEvent }>
}

export class SeenSender extends Context.Service<SeenSender, {
  /** Buckets with signs waiting or on their way, and session signs not stored yet: 0 once every owner handled what it was sent. */
  readonly pending: () => number
}>()("voltaic/entities/SeenSender") {}

export const SeenSenderLive = Layer.effect(
  SeenSender,
  Effect.gen(function*() {
    const activity = yield* Activity
    const sql = yield* Sql
    const bus = yield* Bus
    const rules = yield* Rules
    const client = yield* DeviceBucket.client
    const pending = new Map<string, Map<string, Pending>>()
    /** Buckets queued or being sent: what comes for them meanwhile waits in `pending`. */
    const busy = new Set<string>()
    const ready = yield* Queue.unbounded<string>()
    const clock = yield* Clock.Clock
    const lastSent = new Map<string, number>()
    /** Buckets waiting for their spacing to pass. */
    const deferred = new Set<string>()
    let dropped = 0

    const schedule = (bucket: string) => {
      const sent = lastSent.get(bucket)
      if (sent === undefined || clock.currentTimeMillisUnsafe() - sent >= SPACING_MS) Queue.offerUnsafe(ready, bucket)
      else deferred.add(bucket)
    }
    yield* Effect.forkScoped(Effect.forever(Effect.delay(
      Effect.sync(() => {
        const now = clock.currentTimeMillisUnsafe()
        for (const bucket of deferred) {
          if (now - (lastSent.get(bucket) ?? 0) < SPACING_MS) continue
          deferred.delete(bucket)
          Queue.offerUnsafe(ready, bucket)
        }
      }),
      `${SPACING_MS / 4} millis`
    )))

    const fold = (devices: Map<string, Pending>, deviceId: string, organisationId: string, at: number, events: Pending["events"]) => {
      const p = devices.get(deviceId)
      if (p === undefined) {
        devices.set(deviceId, { organisationId, at, events: events.slice(-MAX_EVENTS) })
        dropped += Math.max(0, events.length - MAX_EVENTS)
        return
      }
      if (at > p.at) p.at = at
      for (const e of events) p.events.push(e)
      if (p.events.length > MAX_EVENTS) {
        dropped += p.events.length - MAX_EVENTS
        p.events = p.events.slice(-MAX_EVENTS)
      }
    }

    const queue = (bucket: string) => {
      if (busy.has(bucket)) return
      busy.add(bucket)
      schedule(bucket)
    }

    const add = (a: DeviceActivity) => {
      const bucket = bucketOf(a.deviceId)
      let devices = pending.get(bucket)
      if (devices === undefined) pending.set(bucket, (devices = new Map()))
      const held = rules.get(a.organisationId)
      const event = a.event !== undefined && (held === undefined || watchesEvent(held.rules, a.event.name)) ? a.event : undefined
      fold(devices, a.deviceId, a.organisationId, a.at, event === undefined ? [] : [{ at: a.at, event }])
      queue(bucket)
    }

    const signsOf = (devices: Map<string, Pending>) => {
      const signs: Array<Sign> = []
      for (const [deviceId, p] of devices) {
        let last = -Infinity
        for (const e of p.events) {
          signs.push({ deviceId, organisationId: p.organisationId, at: e.at, event: e.event })
          last = Math.max(last, e.at)
        }
        if (p.at > last) signs.push({ deviceId, organisationId: p.organisationId, at: p.at })
      }
      return signs
    }

    const send = Effect.fnUntraced(function*(bucket: string) {
      const devices = pending.get(bucket)
      pending.delete(bucket)
      lastSent.set(bucket, clock.currentTimeMillisUnsafe())
      if (devices !== undefined) {
        const sent = yield* client(bucket).Seen({ signs: signsOf(devices) }).pipe(
          Effect.timeout(SEND_TIMEOUT),
          Effect.as(true),
          Effect.catchCause((cause) => Effect.as(Effect.logDebug(`seen: bucket ${bucket} not reached, retrying`, cause), false))
        )
        if (!sent) {
          // Put back before what came meanwhile, and tried again shortly.
          const later = pending.get(bucket)
          pending.set(bucket, devices)
          if (later !== undefined) for (const [id, p] of later) fold(devices, id, p.organisationId, p.at, p.events)
          yield* Effect.sleep(RETRY_AFTER)
        }
      }
      if (dropped > 0) {
        yield* Effect.logWarning(`seen: owners slower than ingest, ${dropped} rule evaluations dropped (signs of life kept)`)
        dropped = 0
      }
      if (pending.has(bucket)) schedule(bucket)
      else busy.delete(bucket)
    })

    for (let i = 0; i < SENDERS; i++) yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(ready), send)))

    // Session signs: stored first (batched while a write is on its way), then sent.
    let sessions = new Map<string, DeviceActivity>()
    let waiting: Array<Deferred.Deferred<void>> = []
    let storing = 0
    const sessionsReady = yield* Queue.sliding<void>(1)
    const storeSessions = Effect.gen(function*() {
      yield* Queue.take(sessionsReady)
      const batch = sessions
      const waiters = waiting
      sessions = new Map()
      waiting = []
      storing = batch.size
      if (batch.size > 0) {
        const moved = yield* touchDevices(sql, new Map([...batch].map(([id, a]) => [id, a.at]))).pipe(
          Effect.tapError((e) => Effect.logWarning(`seen: storing ${batch.size} session signs failed, retrying`, e)),
          Effect.retry(STORE_RETRY)
        )
        if (moved.length > 0) yield* bus.control({ type: "devices.seen", deviceIds: moved.map((r) => r.id) })
        for (const a of batch.values()) add({ organisationId: a.organisationId, deviceId: a.deviceId, at: a.at })
      }
      storing = 0
      for (const w of waiters) yield* Deferred.succeed(w, undefined)
    })
    yield* Effect.forkScoped(Effect.forever(storeSessions))

    const session = (a: DeviceActivity) => {
      const known = sessions.get(a.deviceId)
      if (known === undefined || a.at > known.at) sessions.set(a.deviceId, a)
      Queue.offerUnsafe(sessionsReady, undefined)
    }

    yield* activity.subscribe({
      publish: (a) => (a.session === true ? session(a) : add(a)),
      offer: (a) =>
        a.session !== true ? Effect.sync(() => add(a)) : Effect.gen(function*() {
          const stored = yield* Deferred.make<void>()
          waiting.push(stored)
          session(a)
          yield* Deferred.await(stored)
        })
    })
    return SeenSender.of({ pending: () => busy.size + sessions.size + storing })
  })
)
