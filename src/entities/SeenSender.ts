import { Clock, Context, Deferred, Effect, Layer, Queue, Schedule } from "effect"
import { Bus } from "../bus/Bus.ts"
import { Activity, type DeviceActivity } from "../ingest/Activity.ts"
import { touchDevices } from "../store/devices.ts"
import { Sql } from "../store/Sql.ts"
import { bucketOf, DeviceBucket, type Sign } from "./protocol.ts"
import { offlineAfterMs, type OrganisationRules, Rules, watchesEvent } from "./rules.ts"

/**
 * Committed signs of life on their way to the owners of their devices, wherever they run:
 * grouped by bucket, one `Seen` per bucket at a time and at most one per SPACING_MS, never
 * awaited by ingest. A bare sign of a device sent lately is a refresh, which waits up to
 * REFRESH_MS and goes with whatever else its bucket sends meanwhile.
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
/**
 * A bare sign of life (no event a rule looks at) for a device this process sent a sign for less
 * than `refreshWindow` ago is a refresh: its owner holds the device online already and every such
 * sign is in the device's row, which the owner reads before it declares the device offline. A
 * refresh waits until the device's last send plus that window (REFRESH_MS, or a third of the
 * organisation's shortest offline rule if less), not the bucket's SPACING_MS, so a device that
 * keeps publishing costs its bucket a message per REFRESH_MS instead of one per spacing. A sign
 * that may change something (a device not sent lately, whose owner may hold it offline; an event
 * a rule looks at; rules not known here) is sent after SPACING_MS, as before.
 */
const REFRESH_MS = 5_000
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

/** A bucket's signs waiting, and the latest time they may wait until (sender clock; -Infinity: as soon as the spacing allows). */
interface Waiting {
  readonly devices: Map<string, Pending>
  due: number
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
    const pending = new Map<string, Waiting>()
    /** Buckets queued or being sent: what comes for them meanwhile waits in `pending`. */
    const busy = new Set<string>()
    const ready = yield* Queue.unbounded<string>()
    const clock = yield* Clock.Clock
    const lastSent = new Map<string, number>()
    /**
     * Per device, when a send carrying it last reached its owner (sender clock), in two
     * generations swapped every REFRESH_MS: an entry is kept at least that long, and forgetting
     * the older generation costs no pass over a fleet's worth of entries.
     */
    let sentAt = new Map<string, number>()
    let sentBefore = new Map<string, number>()
    /** Per organisation's rules (as held), how long a device's bare signs may wait after its last send. */
    const windows = new WeakMap<OrganisationRules, number>()
    /** Buckets waiting for their spacing, or their refresh, to come. */
    const deferred = new Set<string>()
    let dropped = 0

    /** For an organisation's rules as held here (`rules.get`); none held: 0, every sign goes at the spacing. */
    const refreshWindow = (held: OrganisationRules | undefined) => {
      if (held === undefined) return 0
      let window = windows.get(held)
      if (window === undefined) {
        const shortest = offlineAfterMs(held.rules)
        window = shortest === null ? REFRESH_MS : Math.min(REFRESH_MS, shortest / 3)
        windows.set(held, window)
      }
      return window
    }

    /** When `bucket` may go: not before its spacing, and not before what waits in it is due. */
    const sendAt = (bucket: string) => Math.max((lastSent.get(bucket) ?? -Infinity) + SPACING_MS, pending.get(bucket)?.due ?? -Infinity)

    const schedule = (bucket: string) => {
      if (clock.currentTimeMillisUnsafe() >= sendAt(bucket)) {
        deferred.delete(bucket)
        Queue.offerUnsafe(ready, bucket)
      } else deferred.add(bucket)
    }
    yield* Effect.forkScoped(Effect.forever(Effect.delay(
      Effect.sync(() => {
        const now = clock.currentTimeMillisUnsafe()
        for (const bucket of deferred) {
          if (now < sendAt(bucket)) continue
          deferred.delete(bucket)
          Queue.offerUnsafe(ready, bucket)
        }
      }),
      `${SPACING_MS / 4} millis`
    )))
    yield* Effect.forkScoped(Effect.forever(Effect.delay(
      Effect.sync(() => {
        sentBefore = sentAt
        sentAt = new Map()
      }),
      `${REFRESH_MS} millis`
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

    const add = (a: DeviceActivity) => {
      const bucket = bucketOf(a.deviceId)
      let waiting = pending.get(bucket)
      if (waiting === undefined) pending.set(bucket, (waiting = { devices: new Map(), due: Infinity }))
      const held = rules.get(a.organisationId)
      const event = a.event !== undefined && (held === undefined || watchesEvent(held.rules, a.event.name)) ? a.event : undefined
      fold(waiting.devices, a.deviceId, a.organisationId, a.at, event === undefined ? [] : [{ at: a.at, event }])
      const sent = sentAt.get(a.deviceId) ?? sentBefore.get(a.deviceId)
      const due = event === undefined && sent !== undefined ? sent + refreshWindow(held) : -Infinity
      const sooner = due < waiting.due
      if (sooner) waiting.due = due
      if (!busy.has(bucket)) {
        busy.add(bucket)
        schedule(bucket)
      } else if (sooner && deferred.has(bucket)) schedule(bucket)
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
      const waiting = pending.get(bucket)
      pending.delete(bucket)
      const started = clock.currentTimeMillisUnsafe()
      lastSent.set(bucket, started)
      if (waiting !== undefined) {
        const devices = waiting.devices
        const sent = yield* client(bucket).Seen({ signs: signsOf(devices) }).pipe(
          Effect.timeout(SEND_TIMEOUT),
          Effect.as(true),
          Effect.catchCause((cause) => Effect.as(Effect.logDebug(`seen: bucket ${bucket} not reached, retrying`, cause), false))
        )
        if (sent) for (const deviceId of devices.keys()) sentAt.set(deviceId, started)
        else {
          // Put back before what came meanwhile, and tried again shortly (as soon as the spacing allows).
          const later = pending.get(bucket)
          pending.set(bucket, { devices, due: -Infinity })
          if (later !== undefined) for (const [id, p] of later.devices) fold(devices, id, p.organisationId, p.at, p.events)
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
