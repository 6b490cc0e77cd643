import { Effect, Layer } from "effect"
import { Entity } from "effect/cluster"
import type { AlertEvent } from "../../actors/alertMachine.ts"
import { Bus } from "../bus/Bus.ts"
import { alertTopic } from "../bus/topics.ts"
import { Notifier } from "../notify/Notifier.ts"
import type { AlertJson } from "../store/alerts.ts"
import { Sql } from "../store/Sql.ts"
import { AlertNotifications } from "./AlertNotifications.ts"
import {
  autoResolves,
  findInSlot,
  fromJson,
  insertAlert,
  type Latest,
  loadSlot,
  sameState,
  type Slot,
  slotOf,
  spaceOfDevice,
  step,
  writeAlert
} from "./alertSlot.ts"
import { Alert, AlertChanged, type Raise, Space } from "./protocol.ts"

/**
 * The Alert entity: the open alert of one (rule, device) (entity id `alertEntityId`), hosting its
 * `alertMachine`. Every transition of the pair's alerts — raised and repeated by the device's
 * entity, cleared (auto-resolve), acknowledged and resolved over REST — is decided here, by one
 * owner, one message at a time: two resolves, or a resolve racing an auto-resolve, are applied
 * in some order and the second finds the alert resolved.
 *
 * After its row is written, a transition is published on the bus (`devices/{id}/alerts`), a
 * newly opened alert is handed to the notifications, and an opened or closed alert is told to
 * the Space entity of its device's space (persisted, keyed by alert and open/closed).
 *
 * At least once. A message is handled again when its owner died before marking it processed;
 * the handler then finds its effect in the rows: a Raise not later than the slot's newest
 * `lastSeenAt` is applied already (or older than what the slot has seen) and does nothing; a
 * Clear, Acknowledge or Resolve of an alert that is no longer open does nothing. The space
 * change is the one effect that could be missed by a crash between the row and the message, so
 * each activation tells the space the slot's newest alert again (the cluster drops it as a
 * duplicate of the one already stored).
 */

const spaceOf = (alert: AlertJson) => alert.device?.space?.id ?? null

export const AlertLive = Alert.toLayer(
  Effect.gen(function*() {
    const { ruleId, deviceId } = slotOf((yield* Entity.CurrentAddress).entityId)
    const sql = yield* Sql
    const bus = yield* Bus
    const notifications = yield* AlertNotifications
    const spaces = yield* Space.client
    const store = <A, E>(effect: Effect.Effect<A, E>) => Effect.orDie(effect)

    let slot: Slot = yield* store(loadSlot(sql, ruleId, deviceId))

    const publish = (organisationId: string, alert: AlertJson) =>
      Effect.sync(() => {
        if (alert.device === null) return
        bus.send({ organisationId, deviceId: alert.device.id, topic: alertTopic(alert.device.id), payload: JSON.stringify(alert) })
      })

    /** Tells the space; `wait`: until it has counted it (REST answers after). */
    const tellSpace = (spaceId: string | null, alertId: string, open: boolean, wait: boolean) =>
      spaceId === null
        ? Effect.void
        : spaces(spaceId).AlertChanged(new AlertChanged({ alertId, deviceId, open }), { discard: !wait }).pipe(Effect.orDie)

    const held = (alert: AlertJson, organisationId: string) => {
      const latest = fromJson(alert, organisationId)
      slot = { open: latest.context.resolvedAt === null ? latest : null, latest }
      return latest
    }

    const reload = Effect.suspend(() => store(loadSlot(sql, ruleId, deviceId))).pipe(Effect.map((read) => {
      slot = read
    }))

    /**
     * Runs an event through the open alert's machine and writes it. Answers the written alert,
     * undefined when the machine did not move, or "gone" when the row was no longer open (resolved
     * or deleted behind this entity: the slot is read again).
     */
    const transition = (open: Latest, event: AlertEvent) =>
      Effect.gen(function*() {
        const next = step(open, event)
        if (sameState(open, next)) return undefined
        const written = yield* store(writeAlert(sql, open.id, next))
        if (written === undefined) {
          yield* reload
          return "gone" as const
        }
        held(written, open.organisationId)
        yield* publish(open.organisationId, written)
        return written
      })

    const raise = (payload: Raise): Effect.Effect<void> =>
      Effect.gen(function*() {
        if (slot.latest !== null && payload.at <= slot.latest.context.lastSeenAt) return
        const open = slot.open
        if (open !== null) {
          const outcome = yield* transition(open, { type: "alert.repeated", at: payload.at })
          if (outcome === "gone") return yield* raise(payload)
          return
        }
        const opened = yield* store(insertAlert(sql, {
          organisationId: payload.organisationId,
          ruleId,
          deviceId,
          at: payload.at,
          note: payload.note,
          event: payload.event
        }))
        if (opened === undefined) {
          // An open alert this entity did not know of (written before it was activated): repeat it.
          yield* reload
          if (slot.open === null) return yield* Effect.die(new Error(`alert slot ${ruleId}/${deviceId}: open alert neither found nor inserted`))
          return yield* raise(payload)
        }
        held(opened, payload.organisationId)
        yield* publish(payload.organisationId, opened)
        yield* tellSpace(spaceOf(opened), opened.id, true, false)
        yield* notifications.opened({ organisationId: payload.organisationId, alert: opened })
      })

    /** Acknowledge or resolve by id: applied to the open alert if it is that one. */
    const byId = (alertId: string, event: AlertEvent) =>
      Effect.gen(function*() {
        const open = slot.open
        if (open !== null && open.id === alertId) {
          const written = yield* transition(open, event)
          if (written !== "gone") {
            const resolved = written !== undefined && written.resolvedAt !== null
            if (resolved) yield* tellSpace(spaceOf(written), written.id, false, true)
            return { found: true, resolved }
          }
        }
        const found = yield* store(findInSlot(sql, alertId, ruleId, deviceId))
        if (found === undefined) return { found: false, resolved: false }
        // Resolved already (by the other caller, or by a Clear): answer once the space counted it.
        if (found.resolved) yield* tellSpace(found.spaceId, alertId, false, true)
        return { found: true, resolved: false }
      })

    // Re-tell the space the newest alert's state (a duplicate of what is stored, unless a crash lost it).
    const latest = slot.latest
    if (latest !== null) {
      yield* tellSpace(yield* store(spaceOfDevice(sql, deviceId)), latest.id, latest.context.resolvedAt === null, false)
    }

    return Alert.of({
      Raise: ({ payload }) => raise(payload),
      Clear: ({ payload }) =>
        Effect.gen(function*() {
          const open = slot.open
          if (open === null || payload.at < open.context.firstSeenAt) return
          const autoResolve = yield* store(autoResolves(sql, ruleId))
          if (!autoResolve) return
          const written = yield* transition(open, { type: "alert.cleared", at: payload.at, autoResolve })
          if (written === undefined || written === "gone" || written.resolvedAt === null) return
          yield* tellSpace(spaceOf(written), written.id, false, false)
        }),
      Acknowledge: ({ payload }) => byId(payload.alertId, { type: "alert.acknowledged", at: payload.at }),
      Resolve: ({ payload }) => byId(payload.alertId, { type: "alert.resolved", at: payload.at })
    })
  })
)

/** The Alert entity with its notifications; needs the cluster's `Sharding`, the store and the bus. */
export const AlertEntityLive = AlertLive.pipe(Layer.provide(AlertNotifications.layer), Layer.provide(Notifier.layer))
