import { assign, setup } from "xstate"

/**
 * One alert: unresolved → acknowledged → resolved. A resolved alert never reopens (a new
 * occurrence opens a new alert); resolving twice is harmless.
 */
export interface AlertContext {
  readonly firstSeenAt: number
  readonly lastSeenAt: number
  readonly acknowledgedAt: number | null
  readonly resolvedAt: number | null
}

export type AlertEvent =
  | { readonly type: "alert.repeated"; readonly at: number }
  | { readonly type: "alert.acknowledged"; readonly at: number }
  | { readonly type: "alert.resolved"; readonly at: number }
  /** The condition cleared (device back, value in range): resolves only an autoResolve rule's alert. */
  | { readonly type: "alert.cleared"; readonly at: number; readonly autoResolve: boolean }

export const alertMachine = setup({
  types: {
    context: {} as AlertContext,
    events: {} as AlertEvent,
    input: {} as { at: number }
  },
  guards: {
    autoResolves: ({ event }) => event.type === "alert.cleared" && event.autoResolve
  },
  actions: {
    repeat: assign(({ event }) => ({ lastSeenAt: event.at })),
    acknowledge: assign(({ context, event }) => ({ acknowledgedAt: context.acknowledgedAt ?? event.at })),
    resolve: assign(({ event }) => ({ resolvedAt: event.at }))
  }
}).createMachine({
  id: "alert",
  context: ({ input }) => ({ firstSeenAt: input.at, lastSeenAt: input.at, acknowledgedAt: null, resolvedAt: null }),
  initial: "unresolved",
  states: {
    unresolved: {
      on: {
        "alert.repeated": { actions: "repeat" },
        "alert.acknowledged": { target: "acknowledged", actions: "acknowledge" },
        "alert.resolved": { target: "resolved", actions: "resolve" },
        "alert.cleared": { guard: "autoResolves", target: "resolved", actions: "resolve" }
      }
    },
    acknowledged: {
      on: {
        "alert.repeated": { actions: "repeat" },
        "alert.acknowledged": {},
        "alert.resolved": { target: "resolved", actions: "resolve" },
        "alert.cleared": { guard: "autoResolves", target: "resolved", actions: "resolve" }
      }
    },
    resolved: { type: "final" }
  }
})
