import { type AlertState, isOpen, type Latest, newAlertId, type Opening, sameState, type Slot, slotKey, step } from "./alertSlot.ts"
import type { AlertIntent } from "./protocol.ts"

/**
 * What a batch of raises and clears does to the slots held, decided by each slot's
 * `alertMachine`, without I/O: the alerts to open (one insert) and the open alerts to write
 * (one update), each with its final state after every intent of the batch for its slot, in order.
 * A raise no later than the slot's newest `lastSeenAt` was applied already (or is older than
 * what it has seen) and does nothing; a clear of an alert that is not open, or older than it, too.
 */

export interface Update {
  readonly key: string
  readonly id: string
  readonly organisationId: string
  readonly next: AlertState
}

export interface Written {
  readonly openings: ReadonlyArray<Opening>
  readonly updates: ReadonlyArray<Update>
}

/** A new alert's state (`alertMachine`'s initial state for input `at`). */
const opened = (at: number): AlertState => ({
  state: "unresolved",
  context: { firstSeenAt: at, lastSeenAt: at, acknowledgedAt: null, resolvedAt: null }
})

export const planIntents = (slots: ReadonlyMap<string, Slot>, intents: ReadonlyArray<AlertIntent>): Written => {
  const openings = new Map<string, Opening>()
  const updates = new Map<string, Update>()
  /** Each slot's state as the batch goes: its open alert and newest one. */
  const held = new Map<string, { open: Latest | null; latest: Latest | null }>()

  for (const intent of intents) {
    const key = slotKey(intent.ruleId, intent.deviceId)
    const slot = held.get(key) ?? slots.get(key) ?? { open: null, latest: null }
    const moved = (latest: Latest, next: AlertState) => {
      const now: Latest = { ...latest, state: next.state, context: next.context }
      held.set(key, { open: isOpen(now) ? now : null, latest: now })
      const opening = openings.get(now.id)
      if (opening !== undefined) openings.set(now.id, { ...opening, next })
      else updates.set(now.id, { key, id: now.id, organisationId: now.organisationId, next })
    }
    if (intent.kind === "raise") {
      if (slot.latest !== null && intent.at <= slot.latest.context.lastSeenAt) continue
      const open = slot.open
      if (open !== null) {
        const next = step(open, { type: "alert.repeated", at: intent.at })
        if (!sameState(open, next)) moved(open, next)
        continue
      }
      const next = opened(intent.at)
      const id = newAlertId()
      openings.set(id, {
        id,
        organisationId: intent.organisationId,
        ruleId: intent.ruleId,
        deviceId: intent.deviceId,
        note: intent.note,
        event: intent.event,
        next
      })
      const latest: Latest = { id, organisationId: intent.organisationId, ...next }
      held.set(key, { open: latest, latest })
      continue
    }
    const open = slot.open
    if (open === null || intent.at < open.context.firstSeenAt) continue
    const next = step(open, { type: "alert.cleared", at: intent.at, autoResolve: intent.autoResolve })
    if (!sameState(open, next)) moved(open, next)
  }
  return { openings: [...openings.values()], updates: [...updates.values()] }
}
