import { Clock, Effect, Layer } from "effect"
import { Entity } from "effect/cluster"
import type { AlertEvent } from "../../actors/alertMachine.ts"
import { Bus } from "../bus/Bus.ts"
import { alertTopic } from "../bus/topics.ts"
import { Notifier } from "../notify/Notifier.ts"
import type { AlertJson } from "../store/alerts.ts"
import { Sql } from "../store/Sql.ts"
import { type AlertOpened, AlertNotifications } from "./AlertNotifications.ts"
import { planIntents, type Written } from "./alertPlan.ts"
import { findInSlot, fromJson, insertAlerts, loadSlots, sameState, type Slot, slotKey, step, writeAlerts } from "./alertSlot.ts"
import { AlertBucket, type AlertChanged, type AlertIntent } from "./protocol.ts"
import { SpaceChanges } from "./spaceChanges.ts"

/**
 * The AlertBucket entity: the alert slots — one per (rule, device) — of the devices of one
 * device bucket (same entity id, same shard), each slot's open alert hosting its
 * `alertMachine`. Every transition — raised, repeated and cleared by the device bucket (`Apply`,
 * a whole step's intents in one message), acknowledged and resolved over REST — is decided
 * here, by one owner, one message at a time: two resolves, or a resolve racing an auto-resolve,
 * are applied in some order and the second finds the alert resolved.
 *
 * A batch costs a few statements whatever its size: one reads the slots not held (but those
 * with only raises, the usual case of a burst of offline alerts), one inserts the alerts opened
 * (guarded by the slot's rows, and `alerts_one_open`: a slot with an open or newer alert, or one
 * opened behind this entity, is read and its intents applied again), one updates those repeated,
 * cleared or resolved.
 * After the rows, each written alert is published on the bus (`devices/{id}/alerts`), a newly
 * opened one is handed to the notifications (off this path), and the spaces are told which
 * alerts of the batch's slots are open or closed, awaited (`SpaceChanges`: one message per space
 * for all the steps of a few milliseconds).
 *
 * At least once. A batch handled again (its sender's step is run again) finds its effects in
 * the slots: a raise no later than the slot's newest `lastSeenAt` and a clear of an alert not
 * open do nothing; the spaces are told the touched slots' state again, which they count once.
 */

/** Attempts for slots whose rows changed behind this entity (read again each time after the first). */
const ATTEMPTS = 4

export const AlertBucketLive = AlertBucket.toLayer(
  Effect.gen(function*() {
    const sql = yield* Sql
    const bus = yield* Bus
    const notifications = yield* AlertNotifications
    const spaceChanges = yield* SpaceChanges
    const store = <A, E>(effect: Effect.Effect<A, E>) => Effect.orDie(effect)
    const slots = new Map<string, Slot>()

    const publish = (organisationId: string, alert: AlertJson) => {
      // An alert with no device has no topic: cached pages of alerts hear of it by a notice.
      if (alert.device === null) return void Effect.runFork(bus.control({ type: "alerts.changed", organisationIds: [organisationId] }))
      bus.send({ organisationId, deviceId: alert.device.id, topic: alertTopic(alert.device.id), payload: JSON.stringify(alert) })
    }

    /** Reads the slots not held (or all of `keys` when `again`). */
    const load = Effect.fnUntraced(function*(keys: ReadonlyArray<{ ruleId: string; deviceId: string }>, again: boolean) {
      const missing = keys.filter((k) => again || !slots.has(slotKey(k.ruleId, k.deviceId)))
      if (missing.length === 0) return
      const read = yield* store(loadSlots(sql, missing))
      for (const [key, slot] of read) slots.set(key, slot)
    })

    const hold = (written: AlertJson, organisationId: string, spaceId: string | null) => {
      const latest = fromJson(written, organisationId)
      slots.set(slotKey(written.alertRule.id, written.device?.id ?? ""), { open: latest.context.resolvedAt === null ? latest : null, latest, spaceId })
    }

    /** Tells the spaces which alerts are open or closed, one awaited message per space. */
    const tellSpaces = Effect.fnUntraced(function*(changes: ReadonlyArray<{ spaceId: string | null; change: AlertChanged }>) {
      const bySpace = new Map<string, Array<AlertChanged>>()
      for (const { spaceId, change } of changes) {
        if (spaceId === null) continue
        const list = bySpace.get(spaceId) ?? []
        list.push(change)
        bySpace.set(spaceId, list)
      }
      if (bySpace.size > 0) yield* Effect.orDie(spaceChanges.tell([...bySpace].map(([spaceId, alerts]) => ({ spaceId, devices: [], alerts }))))
    })

    /** Writes the alerts planned; answers the slots (keys) whose rows turned out to have changed behind this entity. */
    const write = Effect.fnUntraced(function*(written: Written, now: number) {
      const inserted = yield* store(insertAlerts(sql, written.openings))
      const updated = yield* store(writeAlerts(sql, written.updates.map((u) => ({ id: u.id, next: u.next }))))
      const stale = new Set<string>()
      const got = new Set([...inserted, ...updated].map((a) => a.id))
      for (const o of written.openings) if (!got.has(o.id)) stale.add(slotKey(o.ruleId, o.deviceId))
      for (const u of written.updates) if (!got.has(u.id)) stale.add(u.key)
      const organisationOf = new Map<string, string>()
      for (const o of written.openings) organisationOf.set(o.id, o.organisationId)
      for (const u of written.updates) organisationOf.set(u.id, u.organisationId)
      const opened = new Set(written.openings.map((o) => o.id))
      const notices: Array<AlertOpened> = []
      for (const alert of [...inserted, ...updated]) {
        const organisationId = organisationOf.get(alert.id) ?? ""
        hold(alert, organisationId, alert.device?.space?.id ?? null)
        publish(organisationId, alert)
        if (opened.has(alert.id)) notices.push({ organisationId, alert })
      }
      yield* notifications.opened(notices)
      return stale
    })

    /** The slots not held whose intents in `intents` are all raises. */
    const raisesOnly = (intents: ReadonlyArray<AlertIntent>) => {
      const keys = new Set<string>()
      const cleared = new Set<string>()
      for (const i of intents) {
        const key = slotKey(i.ruleId, i.deviceId)
        if (i.kind === "clear") cleared.add(key)
        else if (!slots.has(key)) keys.add(key)
      }
      for (const key of cleared) keys.delete(key)
      return keys
    }

    const apply = Effect.fnUntraced(function*(intents: ReadonlyArray<AlertIntent>) {
      const now = yield* Clock.currentTimeMillis
      const touched = new Map<string, { ruleId: string; deviceId: string }>()
      for (const i of intents) touched.set(slotKey(i.ruleId, i.deviceId), { ruleId: i.ruleId, deviceId: i.deviceId })
      let pending = intents
      let again = false
      for (let attempt = 0; pending.length > 0; attempt++) {
        if (attempt === ATTEMPTS) return yield* Effect.die(new Error(`alert bucket: slots keep changing behind it`))
        // A slot not held whose intents are all raises is not read first: its alert is opened
        // with a guard on the slot's rows (`insertAlerts`), and read only if the guard refuses it.
        const unread = again ? new Set<string>() : raisesOnly(pending)
        yield* load(pending.filter((i) => !unread.has(slotKey(i.ruleId, i.deviceId))), again)
        const stale = yield* write(planIntents(slots, pending), now)
        for (const key of stale) slots.delete(key)
        pending = pending.filter((i) => stale.has(slotKey(i.ruleId, i.deviceId)))
        again = true
      }
      // Every touched slot's newest alert, open or closed: counted once however often it is told.
      const changes: Array<{ spaceId: string | null; change: AlertChanged }> = []
      for (const [key, { deviceId }] of touched) {
        const slot = slots.get(key)
        if (slot?.latest == null) continue
        changes.push({ spaceId: slot.spaceId, change: { alertId: slot.latest.id, deviceId, open: slot.open !== null } })
      }
      yield* tellSpaces(changes)
    })

    /** Acknowledge or resolve by id: applied to the open alert if it is that one. */
    const byId = Effect.fnUntraced(function*(p: { alertId: string; ruleId: string; deviceId: string; at: number }, event: AlertEvent) {
      const key = slotKey(p.ruleId, p.deviceId)
      yield* load([p], false)
      const open = slots.get(key)?.open ?? null
      if (open !== null && open.id === p.alertId) {
        const next = step(open, event)
        if (sameState(open, next)) return { found: true, resolved: false }
        const now = yield* Clock.currentTimeMillis
        const [written] = yield* store(writeAlerts(sql, [{ id: open.id, next }]))
        if (written !== undefined) {
          hold(written, open.organisationId, written.device?.space?.id ?? null)
          publish(open.organisationId, written)
          const resolved = written.resolvedAt !== null
          if (resolved) yield* tellSpaces([{ spaceId: written.device?.space?.id ?? null, change: { alertId: written.id, deviceId: p.deviceId, open: false } }])
          return { found: true, resolved }
        }
        slots.delete(key)
      }
      const found = yield* store(findInSlot(sql, p.alertId, p.ruleId, p.deviceId))
      if (found === undefined) return { found: false, resolved: false }
      // Resolved already (by the other caller, or by a clear): answer once the space counted it.
      if (found.resolved) yield* tellSpaces([{ spaceId: found.spaceId, change: { alertId: p.alertId, deviceId: p.deviceId, open: false } }])
      return { found: true, resolved: false }
    })

    return AlertBucket.of({
      Apply: ({ payload }) => apply(payload.intents),
      Acknowledge: ({ payload }) => byId(payload, { type: "alert.acknowledged", at: payload.at }),
      Resolve: ({ payload }) => byId(payload, { type: "alert.resolved", at: payload.at })
    })
  })
)

/** The AlertBucket entity with its notifications; needs the cluster's `Sharding`, the store and the bus. */
export const AlertEntityLive = AlertBucketLive.pipe(Layer.provide(AlertNotifications.layer), Layer.provide(Notifier.layer))
