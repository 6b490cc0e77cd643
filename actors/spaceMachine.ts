import { assign, setup } from "xstate"

/**
 * One space's live view: which of its devices are online or offline, which alerts of its
 * devices are open, its timezone and who receives its alert e-mails. Pure and idempotent: the
 * state is a set, not a running total, so a change told twice counts once.
 *
 * - Per device: its liveness and the time it took it (`at`); a change older than the one held
 *   is ignored, so changes may arrive out of order or again.
 * - Per open alert: its id and device. An alert never reopens, so a closed alert's id is kept
 *   (the last CLOSED_KEPT of them) and an `alert.opened` arriving after its close is ignored.
 * - Changes about a device that is not a member (moved away, deleted, or created after the
 *   seed) are ignored: the host checks the store and tells `device.joined` if it belongs here.
 * - `space.seeded` replaces members, alerts and settings with what the store holds; a member's
 *   newer liveness than the seed's is kept.
 *
 * The counts are kept with the sets (a read is O(1)). The maps are updated in place: they
 * belong to this actor alone, and copying one per change would cost O(devices) a message for a
 * large space. The context is never persisted (the host seeds it from the store).
 */

/** Where a device stands for the counts: `other` is neither (never seen, or not watched). */
export type Liveness = "online" | "offline" | "other"

export interface DeviceLiveness {
  readonly liveness: Liveness
  readonly at: number
}

export interface SpaceContext {
  readonly spaceId: string
  /** IANA zone of the space. */
  readonly timezone: string
  /** Organisation user ids receiving the space's alert e-mails, in the order they were added. */
  readonly recipients: ReadonlyArray<string>
  /** The member devices. */
  readonly devices: Map<string, DeviceLiveness>
  /** Open alerts (unresolved or acknowledged) of member devices: alert id → device id. */
  readonly alerts: Map<string, string>
  /** Recently closed alert ids, oldest first (at most CLOSED_KEPT). */
  readonly closed: Set<string>
  readonly devicesOnline: number
  readonly devicesOffline: number
  readonly openAlerts: number
}

export interface SeededDevice {
  readonly deviceId: string
  readonly liveness: Liveness
  readonly at: number
}

export interface SeededAlert {
  readonly alertId: string
  readonly deviceId: string
}

export type SpaceEvent =
  /** A member device's liveness as of `at`. */
  | { readonly type: "device.liveness"; readonly deviceId: string; readonly liveness: Liveness; readonly at: number }
  /** A device found to be a member (the store says so), with its liveness as of `at`. */
  | { readonly type: "device.joined"; readonly deviceId: string; readonly liveness: Liveness; readonly at: number }
  /** An alert of a member device opened. */
  | { readonly type: "alert.opened"; readonly alertId: string; readonly deviceId: string }
  /** An alert was resolved or deleted. */
  | { readonly type: "alert.closed"; readonly alertId: string }
  /**
   * Many of the changes above at once, applied in order (devices, then alerts): what one message
   * of the host carries. The same state as sending them one by one, for one step of the machine.
   */
  | {
    readonly type: "changes"
    readonly devices: ReadonlyArray<{ readonly deviceId: string; readonly liveness: Liveness; readonly at: number }>
    readonly alerts: ReadonlyArray<{ readonly alertId: string; readonly deviceId: string; readonly open: boolean }>
  }
  /** What the store holds: members with their liveness, open alerts, settings. */
  | {
    readonly type: "space.seeded"
    readonly timezone: string
    readonly recipients: ReadonlyArray<string>
    readonly devices: ReadonlyArray<SeededDevice>
    readonly alerts: ReadonlyArray<SeededAlert>
  }

export interface SpaceInput {
  readonly spaceId: string
  readonly timezone: string
  readonly recipients?: ReadonlyArray<string>
  readonly devices?: ReadonlyArray<SeededDevice>
  readonly alerts?: ReadonlyArray<SeededAlert>
}

/** Closed alert ids remembered against a late `alert.opened`. */
export const CLOSED_KEPT = 1024

export const livenessOf = (value: unknown): Liveness => (value === "online" ? "online" : value === "offline" ? "offline" : "other")

const weight = (liveness: Liveness) => ({ online: liveness === "online" ? 1 : 0, offline: liveness === "offline" ? 1 : 0 })

interface Counts {
  devicesOnline: number
  devicesOffline: number
  openAlerts: number
}

const countsOf = (context: SpaceContext): Counts => ({
  devicesOnline: context.devicesOnline,
  devicesOffline: context.devicesOffline,
  openAlerts: context.openAlerts
})

/** Sets a device's liveness (adding it if new) and moves the counts. */
const setDevice = (context: SpaceContext, counts: Counts, deviceId: string, next: DeviceLiveness) => {
  const was = context.devices.get(deviceId)
  if (was !== undefined) {
    const w = weight(was.liveness)
    counts.devicesOnline -= w.online
    counts.devicesOffline -= w.offline
  }
  context.devices.set(deviceId, next)
  const w = weight(next.liveness)
  counts.devicesOnline += w.online
  counts.devicesOffline += w.offline
}

const closeAlert = (context: SpaceContext, counts: Counts, alertId: string) => {
  if (context.alerts.delete(alertId)) counts.openAlerts -= 1
  context.closed.delete(alertId)
  context.closed.add(alertId)
  if (context.closed.size > CLOSED_KEPT) {
    const oldest = context.closed.values().next()
    if (oldest.done !== true) context.closed.delete(oldest.value)
  }
}

const openAlert = (context: SpaceContext, counts: Counts, alertId: string, deviceId: string) => {
  if (context.alerts.has(alertId) || context.closed.has(alertId) || !context.devices.has(deviceId)) return
  context.alerts.set(alertId, deviceId)
  counts.openAlerts += 1
}

const seed = (context: SpaceContext, devices: ReadonlyArray<SeededDevice>, alerts: ReadonlyArray<SeededAlert>): Counts => {
  const previous = new Map(context.devices)
  context.devices.clear()
  context.alerts.clear()
  const counts: Counts = { devicesOnline: 0, devicesOffline: 0, openAlerts: 0 }
  for (const d of devices) {
    const held = previous.get(d.deviceId)
    setDevice(context, counts, d.deviceId, held !== undefined && held.at > d.at ? held : { liveness: d.liveness, at: d.at })
  }
  for (const a of alerts) openAlert(context, counts, a.alertId, a.deviceId)
  return counts
}

export const spaceMachine = setup({
  types: {
    context: {} as SpaceContext,
    events: {} as SpaceEvent,
    input: {} as SpaceInput
  },
  actions: {
    apply: assign(({ context, event }) => {
      const counts = countsOf(context)
      switch (event.type) {
        case "device.liveness": {
          const held = context.devices.get(event.deviceId)
          if (held === undefined || event.at < held.at) return {}
          setDevice(context, counts, event.deviceId, { liveness: event.liveness, at: event.at })
          return counts
        }
        case "device.joined": {
          const held = context.devices.get(event.deviceId)
          if (held !== undefined && event.at < held.at) return {}
          setDevice(context, counts, event.deviceId, { liveness: event.liveness, at: event.at })
          return counts
        }
        case "alert.opened":
          openAlert(context, counts, event.alertId, event.deviceId)
          return counts
        case "alert.closed":
          closeAlert(context, counts, event.alertId)
          return counts
        case "changes":
          for (const d of event.devices) {
            const held = context.devices.get(d.deviceId)
            if (held !== undefined && d.at >= held.at) setDevice(context, counts, d.deviceId, { liveness: d.liveness, at: d.at })
          }
          for (const a of event.alerts) {
            if (a.open) openAlert(context, counts, a.alertId, a.deviceId)
            else closeAlert(context, counts, a.alertId)
          }
          return counts
        case "space.seeded":
          return { ...seed(context, event.devices, event.alerts), timezone: event.timezone, recipients: [...event.recipients] }
      }
    })
  }
}).createMachine({
  id: "space",
  context: ({ input }) => {
    const context: SpaceContext = {
      spaceId: input.spaceId,
      timezone: input.timezone,
      recipients: [...(input.recipients ?? [])],
      devices: new Map(),
      alerts: new Map(),
      closed: new Set(),
      devicesOnline: 0,
      devicesOffline: 0,
      openAlerts: 0
    }
    return { ...context, ...seed(context, input.devices ?? [], input.alerts ?? []) }
  },
  initial: "live",
  states: {
    live: {
      on: {
        "device.liveness": { actions: "apply" },
        "device.joined": { actions: "apply" },
        "alert.opened": { actions: "apply" },
        "alert.closed": { actions: "apply" },
        changes: { actions: "apply" },
        "space.seeded": { actions: "apply" }
      }
    }
  }
})

/** A device the space does not hold: whether the host should ask the store if it belongs here. */
export const isMember = (context: SpaceContext, deviceId: string) => context.devices.has(deviceId)

/** The live counts of a context. */
export const liveOf = (context: SpaceContext) => ({
  devicesOnline: context.devicesOnline,
  devicesOffline: context.devicesOffline,
  openAlerts: context.openAlerts
})
