import { Clock, Deferred, Duration, Effect, Scope } from "effect"
import { Entity } from "effect/cluster"
import { Sql } from "../store/Sql.ts"
import { type DeviceHost, type HostedDevice, makeDeviceHost } from "./deviceHost.ts"
import { makeDeviceOutbox, retried } from "./deviceOutbox.ts"
import { type DeviceRow, readActivations, readOpenAlerts, readPlaces, readTimed, writeDeviceRows } from "./deviceRows.ts"
import { eachBreathing } from "./breathe.ts"
import { makeBucketTimer } from "./bucketTimer.ts"
import { toMessages } from "./deviceAlerts.ts"
import { AlertBucket, DeviceBucket, type DeviceLiveness, type Sign } from "./protocol.ts"
import { ResidentBuckets } from "./residents.ts"
import { SpaceChanges } from "./spaceChanges.ts"
import { Rules } from "./rules.ts"
import { live as liveMetrics } from "../metrics.ts"
import { DeviceReads } from "../store/DeviceReads.ts"

/**
 * The device bucket entity: the devices of one bucket (`bucketOf`), each hosting its
 * `deviceMachine` (`deviceHost.ts`), activated from their rows on their first message, and
 * what their machines do performed from here:
 *
 * - the offline timers: the bucket's own timer (`Tick`, `bucketTimer.ts`) at its earliest
 *   deadline. Every deadline due fires with it, once the devices' rows confirmed their silence
 *   (a `Seen` lost on the way, or one that reached another owner, is in the row). Each device's
 *   row keeps its deadline (`device_actors.wake_at`, never later than the one held here); the
 *   sweep of stored deadlines (`overdue.ts`) sends a `Wake` to a bucket not hosted yet before
 *   its earliest one (a restart, a handover), and to one whose stored deadline passed unhandled.
 *   On its first tick or wake-up a bucket reads the devices of its rows that have a deadline
 *   (they were hosted by the last owner, which passivates none with a timer);
 * - alerts: the step's raises and clears in one `Apply` to the bucket's AlertBucket entity;
 * - liveness (online, offline, neither): the rows, then the spaces' `Changes` (`SpaceChanges`;
 *   a space seeds from those rows: it is never told a change older than what it read).
 *
 * A step decides, then its effects are performed in order off the mailbox (`deviceOutbox.ts`, `bucketOutbox.ts`):
 * its rows are captured as it ends (each device's `planned` liveness), its alerts applied, then
 * its rows written, then its spaces told, while the next steps are decided; a `Seen` is answered
 * once its effects are done, a tick or wake-up at once. Alerts are applied before the rows that
 * record them: a step that dies in between is run again from the old rows (their deadlines are
 * swept again; a sign of life is in `device_seen.last_seen_at`), and what it sends again is applied
 * once. A step that dies between its rows and `Changes` leaves that space one change behind
 * until the device's next change or the space's next seed (a window of milliseconds).
 *
 * Plain signs of life store nothing: their time is in `device_seen.last_seen_at`, which activation
 * catches up from. Anomaly baselines, which no row re-derives, are written behind every
 * FLUSH_EVERY_MS and when the bucket leaves memory.
 */

const FLUSH_EVERY_MS = 5_000
const SWEEP_EVERY = "1 minute"
/** A device not online, idle this long and without a deadline leaves its bucket's memory. */
export const PASSIVATE_AFTER_MS = 5 * 60_000
type Places = Effect.Success<ReturnType<typeof readPlaces>>

export const DeviceBucketLive = DeviceBucket.toLayer(
  Effect.gen(function*() {
    const bucket = (yield* Entity.CurrentAddress).entityId
    const sql = yield* Sql
    const rules = yield* Rules
    const residents = yield* ResidentBuckets
    const reads = yield* DeviceReads
    const self = (yield* DeviceBucket.client)(bucket)
    const alerts = (yield* AlertBucket.client)(bucket)
    const spaceChanges = yield* SpaceChanges
    const timer = makeBucketTimer({ tick: (at) => self.Tick({ at }, { discard: true }), scope: yield* Scope.Scope })
    const outbox = yield* makeDeviceOutbox({ bucket, sql, apply: (intents) => alerts.Apply({ intents }), spaceChanges })
    /** Whether the devices an earlier owner left with a deadline were read (on the first wake-up). */
    let timedRead = false
    const host: DeviceHost = makeDeviceHost((organisationId) => rules.get(organisationId))
    // Counted at each scrape of /metrics while the bucket is here (its finalizer below forgets its devices).
    yield* Effect.acquireRelease(Effect.sync(() => liveMetrics.deviceHosts.add(host)), () => Effect.sync(() => liveMetrics.deviceHosts.delete(host)))
    let flushedAt = yield* Clock.currentTimeMillis

    /** Devices among `ids` not hosted yet, from their rows (a deleted device stays out). */
    const activate = Effect.fnUntraced(function*(ids: Iterable<string>, now: number): Effect.fn.Return<Places> {
      const missing = [...new Set(ids)].filter((id) => !host.devices.has(id))
      if (missing.length === 0) return new Map()
      const read = yield* retried(readActivations(sql, missing), "activation")
      yield* retried(rules.load(read.map((a) => a.place.organisationId)), "reading rules")
      // Which alerts a value back in range may clear: asked only where a rule could clear one.
      const clearing = read.filter((a) =>
        (rules.get(a.place.organisationId)?.rules ?? []).some((r) => r.type !== "offline" && r.autoResolve)
      )
      const open = yield* retried(readOpenAlerts(sql, clearing.map((a) => a.deviceId)), "reading alerts")
      yield* eachBreathing(read, (activation) => host.activate({ ...activation, raised: open.get(activation.deviceId) ?? [] }, now))
      // Just read: where they are (their first step may change their liveness).
      return new Map(read.map((a) => [a.deviceId, { place: a.place, lastSeenAt: a.lastSeenAt }]))
    })

    /**
     * Decides what the host collected: its timer at once; its alerts, liveness and rows queued
     * in the outbox. Answers when they are performed.
     */
    const perform = Effect.fnUntraced(function*(now: number, read: Places) {
      const fx = host.drain()
      yield* timer.arm(host.nextDeadline())
      const changed = [...fx.liveness.keys()]
      const spaceOf = new Map<string, string | null>()
      if (changed.length > 0) {
        // Where each device is now (it may have moved since it was activated); a deleted one is forgotten.
        const unread = changed.filter((d) => !read.has(d.id)).map((d) => d.id)
        const places = unread.length === 0 ? read : new Map([...read, ...yield* retried(readPlaces(sql, unread), "reading devices")])
        for (const device of changed) {
          const found = places.get(device.id)
          if (found === undefined) host.forget(device.id)
          else spaceOf.set(device.id, found.place.spaceId)
        }
      }
      const intents = toMessages(fx.alerts.filter((a) => host.devices.has(a.deviceId)))
      const rows: Array<DeviceRow> = []
      const bySpace = new Map<string, Array<DeviceLiveness>>()
      for (const [device, change] of fx.liveness) {
        const spaceId = spaceOf.get(device.id)
        if (spaceId === undefined) continue
        if (spaceId !== null) {
          const told = bySpace.get(spaceId)
          if (told === undefined) bySpace.set(spaceId, [{ deviceId: device.id, ...change }])
          else told.push({ deviceId: device.id, ...change })
        }
        rows.push({ device, liveness: change.liveness, livenessAt: change.at })
      }
      // Deadlines the rows must follow: a stored one later than the device's (a new owner would
      // fire it late), or one past that the device is not due at (it would be swept for nothing).
      // A device with a row on its way is checked again once that row is written; one whose row's
      // deadline is earlier, and still to come, once it has passed.
      for (const device of host.unsynced) {
        if (device.storedWakeAt === device.wakeAt) {
          host.unsynced.delete(device)
          continue
        }
        if (fx.liveness.has(device) || device.pending > 0) continue
        const late = device.wakeAt !== null && (device.storedWakeAt === null || device.storedWakeAt > device.wakeAt)
        if (late || (device.storedWakeAt !== null && device.storedWakeAt <= now)) {
          rows.push({ device, liveness: device.planned, livenessAt: device.plannedAt })
        }
      }
      if (intents.length === 0 && rows.length === 0) return undefined
      return yield* outbox.enqueue(now, intents, rows, bySpace)
    })

    /** After a message: baselines written behind. */
    const housekeeping = Effect.fnUntraced(function*(now: number) {
      if (now - flushedAt >= FLUSH_EVERY_MS) {
        flushedAt = now
        const dirty = [...host.devices.values()].filter((d) => d.dirty)
        if (dirty.length > 0) yield* outbox.enqueue(now, [], dirty.map((device) => ({ device, liveness: device.planned, livenessAt: device.plannedAt })), new Map())
      }
    })

    const seen = Effect.fnUntraced(function*(signs: ReadonlyArray<Sign>) {
      const now = yield* Clock.currentTimeMillis
      const read = yield* activate(signs.map((s) => s.deviceId), now)
      yield* retried(rules.load(signs.map((s) => s.organisationId)), "reading rules")
      yield* eachBreathing(signs, (sign) => {
        const device = host.devices.get(sign.deviceId)
        if (device !== undefined) host.seen(device, sign.at, sign.event, now)
      })
      const done = yield* perform(now, read)
      yield* housekeeping(now)
      // Answered once performed: a sign's sender (and a test) sees its effects stored.
      if (done !== undefined) yield* Deferred.await(done)
    })

    /** A tick (this instance's timer) or a wake-up (overdue rows) at `at`: every deadline due fires. */
    const wake = Effect.fnUntraced(function*(at: number, tick: boolean) {
      const now = Math.max(yield* Clock.currentTimeMillis, at)
      if (tick) timer.arrived(at)
      let places: Places = new Map()
      if (!timedRead) {
        places = yield* activate(yield* retried(readTimed(sql, bucket), "reading deadlines"), now)
        timedRead = true
      }
      const due = host.due(now)
      if (due.length > 0) {
        // Silent, as far as this owner knows: the rows say whether they really were.
        places = new Map([...places, ...yield* retried(readPlaces(sql, due.map((d) => d.id)), "reading devices")])
        yield* retried(rules.load(due.map((d) => d.place.organisationId)), "reading rules")
        yield* eachBreathing(due, (device) => {
          const found = places.get(device.id)
          if (found === undefined) {
            host.forget(device.id)
            return
          }
          if (found.place.spaceId !== device.place.spaceId || found.place.productId !== device.place.productId) {
            device.place = found.place
            device.rulesVersion = -1
          }
          host.configure(device, now)
          host.caughtUp(device, found.lastSeenAt)
        })
      }
      // Only the devices found due can be: what their rows said moved no other deadline.
      yield* eachBreathing(due, (device) => host.fireDue(device, now))
      // Not waited for: the next deadlines due are decided while this step's alerts and rows go out.
      yield* perform(now, places)
      yield* housekeeping(now)
    })

    const rulesChanged = Effect.fnUntraced(function*(organisationId: string, only: ReadonlyArray<string> | undefined) {
      const now = yield* Clock.currentTimeMillis
      const hosted = [...host.devices.values()].filter((d) =>
        d.place.organisationId === organisationId && (only === undefined || only.includes(d.id))
      )
      if (hosted.length === 0) return
      yield* retried(rules.load([organisationId]), "reading rules")
      // Devices may have moved too (space, product): the rules that apply follow.
      const places = yield* retried(readPlaces(sql, hosted.map((d) => d.id)), "reading devices")
      for (const device of hosted) {
        const found = places.get(device.id)
        if (found === undefined) {
          host.forget(device.id)
          continue
        }
        device.place = found.place
        device.rulesVersion = -1
        host.configure(device, now)
      }
      yield* perform(now, new Map())
    })

    // Idle devices leave memory. Apart from the messages, which is safe: the sweep is synchronous,
    // and leaves alone a device with anything pending (a wake-up, a liveness not stored, baselines).
    // Their rows answer for them from here on: cached device pages holding them go (DeviceReads).
    yield* Effect.forkScoped(Effect.forever(Effect.delay(
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.flatMap(Effect.sync(() => host.sweep(now - PASSIVATE_AFTER_MS)), (gone) => reads.left(gone.map((d) => d.id)))),
      SWEEP_EVERY
    )))
    /** What `GetDevices` answers, and what this process reads of a bucket it hosts (`DeviceOwners`). */
    const live = (deviceIds: ReadonlyArray<string>) =>
      deviceIds.flatMap((id) => {
        const device = host.devices.get(id)
        return device === undefined ? [] : [host.live(device)]
      })
    residents.add(bucket, { devices: host.devices, timed: () => timedRead, live })
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        residents.remove(bucket)
        // Baselines not written yet, of devices whose earlier rows are all written (a row queued
        // behind alerts not applied is not written ahead of them).
        const dirty = [...host.devices.values()].filter((d) => d.dirty && d.pending === 0)
        if (dirty.length > 0) yield* writeDeviceRows(sql, dirty.map((device) => ({ device, liveness: device.reported, livenessAt: device.reportedAt })), yield* Clock.currentTimeMillis)
        const gone = [...host.devices.keys()]
        for (const id of gone) host.forget(id)
        yield* reads.left(gone)
      }).pipe(Effect.catchCause((cause) => Effect.logWarning(`device bucket ${bucket}: snapshots not written on the way out`, cause)))
    )

    return DeviceBucket.of({
      Seen: ({ payload }) => seen(payload.signs),
      Wake: ({ payload }) => wake(payload.at, false),
      Tick: ({ payload }) => wake(payload.at, true),
      GetDevices: ({ payload }) => Effect.sync(() => live(payload.deviceIds)),
      RulesChanged: ({ payload }) => rulesChanged(payload.organisationId, payload.deviceIds)
    })
  }),
  // Never idle out of memory: its devices' timers (and their passivation, `host.sweep`) are its own.
  { maxIdleTime: Duration.infinity }
)
