import { assign, setup } from "xstate"

/**
 * One space's live view: how many of its devices are online and offline, how many of its
 * alerts are open, its timezone and who receives its alert e-mails. Pure: the counts move
 * with the events the supervisor sends (devices going online, offline or out of the
 * counts, alerts opened and resolved), a recount replaces them with what the store counted,
 * and no count ever goes below zero (a change counted twice or lost is undone by the next
 * recount, not carried as a negative number).
 */

/** Where a device stands for the counts: `other` is neither (never seen, or not watched). */
export type Liveness = "online" | "offline" | "other"

export interface SpaceContext {
  readonly spaceId: string
  /** IANA zone of the space. */
  readonly timezone: string
  /** Organisation user ids receiving the space's alert e-mails, in the order they were added. */
  readonly recipients: ReadonlyArray<string>
  readonly devicesOnline: number
  readonly devicesOffline: number
  /** Alerts of the space's devices not resolved yet (unresolved or acknowledged). */
  readonly openAlerts: number
}

/**
 * A change of the counts. `count` (default 1) folds that many identical changes into one
 * event; these events are plain data, carried on the bus between processes.
 */
export type SpaceCountEvent =
  | { readonly type: "device.online"; readonly was: "offline" | "other"; readonly count?: number }
  | { readonly type: "device.offline"; readonly was: "online" | "other"; readonly count?: number }
  /** Out of the counts: no longer watched, deleted, or moved to another space. */
  | { readonly type: "device.left"; readonly was: "online" | "offline"; readonly count?: number }
  | { readonly type: "alert.opened"; readonly count?: number }
  | { readonly type: "alert.resolved"; readonly count?: number }

export type SpaceEvent =
  | SpaceCountEvent
  /** The space's settings as last read; a field left out is unchanged. */
  | { readonly type: "space.configured"; readonly timezone?: string; readonly recipients?: ReadonlyArray<string> }
  /** A full recount from the store (on activation, periodically, after devices moved). */
  | {
    readonly type: "space.recounted"
    readonly devicesOnline: number
    readonly devicesOffline: number
    readonly openAlerts: number
    readonly timezone?: string
    readonly recipients?: ReadonlyArray<string>
  }

export interface SpaceInput {
  readonly spaceId: string
  readonly timezone: string
  readonly recipients?: ReadonlyArray<string>
  readonly devicesOnline?: number
  readonly devicesOffline?: number
  readonly openAlerts?: number
}

/** The count event for a device that went from `from` to `to`; undefined when the counts do not move. */
export const livenessEvent = (from: Liveness, to: Liveness, count = 1): SpaceCountEvent | undefined => {
  if (from === to) return undefined
  if (to === "online") return { type: "device.online", was: from === "offline" ? "offline" : "other", count }
  if (to === "offline") return { type: "device.offline", was: from === "online" ? "online" : "other", count }
  return from === "other" ? undefined : { type: "device.left", was: from, count }
}

const natural = (n: number) => (Number.isFinite(n) && n > 0 ? Math.floor(n) : 0)
const times = (event: { readonly count?: number }) => natural(event.count ?? 1)
/** `value + delta`, never below zero. */
const plus = (value: number, delta: number) => Math.max(0, value + delta)

const moved = (context: SpaceContext, event: SpaceCountEvent): Partial<SpaceContext> => {
  const n = times(event)
  const online = (delta: number) => ({ devicesOnline: plus(context.devicesOnline, delta) })
  const offline = (delta: number) => ({ devicesOffline: plus(context.devicesOffline, delta) })
  switch (event.type) {
    case "device.online":
      return { ...online(n), ...(event.was === "offline" ? offline(-n) : {}) }
    case "device.offline":
      return { ...offline(n), ...(event.was === "online" ? online(-n) : {}) }
    case "device.left":
      return event.was === "online" ? online(-n) : offline(-n)
    case "alert.opened":
      return { openAlerts: plus(context.openAlerts, n) }
    case "alert.resolved":
      return { openAlerts: plus(context.openAlerts, -n) }
  }
}

export const spaceMachine = setup({
  types: {
    context: {} as SpaceContext,
    events: {} as SpaceEvent,
    input: {} as SpaceInput
  },
  actions: {
    count: assign(({ context, event }) =>
      event.type === "space.configured" || event.type === "space.recounted" ? {} : moved(context, event)
    ),
    configure: assign(({ event }) => {
      if (event.type !== "space.configured" && event.type !== "space.recounted") return {}
      const next: { timezone?: string; recipients?: ReadonlyArray<string> } = {}
      if (event.timezone !== undefined) next.timezone = event.timezone
      if (event.recipients !== undefined) next.recipients = [...event.recipients]
      return next
    }),
    recount: assign(({ event }) =>
      event.type === "space.recounted"
        ? { devicesOnline: natural(event.devicesOnline), devicesOffline: natural(event.devicesOffline), openAlerts: natural(event.openAlerts) }
        : {}
    )
  }
}).createMachine({
  id: "space",
  context: ({ input }) => ({
    spaceId: input.spaceId,
    timezone: input.timezone,
    recipients: [...(input.recipients ?? [])],
    devicesOnline: natural(input.devicesOnline ?? 0),
    devicesOffline: natural(input.devicesOffline ?? 0),
    openAlerts: natural(input.openAlerts ?? 0)
  }),
  initial: "live",
  states: {
    live: {
      on: {
        "device.online": { actions: "count" },
        "device.offline": { actions: "count" },
        "device.left": { actions: "count" },
        "alert.opened": { actions: "count" },
        "alert.resolved": { actions: "count" },
        "space.configured": { actions: "configure" },
        "space.recounted": { actions: ["recount", "configure"] }
      }
    }
  }
})
