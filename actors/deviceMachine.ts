import { assign, emit, enqueueActions, setup } from "xstate"
import { type AnomalyConfig, anomalyStep } from "./rules.ts"

/**
 * One device's liveness: online until `OFFLINE_AFTER` passes without a sign of life, then
 * offline until it is seen again. Pure: time arrives in events (`at`), the timer is a named
 * delay, and what happens outside is emitted for the supervisor to perform.
 */
export interface DeviceContext {
  readonly deviceId: string
  /** Epoch ms of the last event, location or session activity. */
  readonly lastSeenAt: number | null
  /** The shortest `afterSeconds` of the offline rules that apply, in ms; null: not watched. */
  readonly offlineAfterMs: number | null
  /** Epoch ms at which the current online period's timer was (re)started. */
  readonly timerFrom: number | null
  /** Recent values per anomaly rule id: the baseline its next value is compared with. */
  readonly baselines: Readonly<Record<string, ReadonlyArray<number>>>
}

export type DeviceEvent =
  /**
   * A sign of life at `at`. `toldAt`: when it was told, if later (a host that noted signs of life
   * and hands over the newest one late): the timer then counts what is left from `at`.
   */
  | { readonly type: "device.seen"; readonly at: number; readonly toldAt?: number | undefined }
  | { readonly type: "device.configured"; readonly offlineAfterMs: number | null; readonly at: number }
  /** After rehydration: restart the timer for what is left of it (timers survive restarts). */
  | { readonly type: "device.resumed"; readonly at: number }
  /**
   * Still offline at a longer offline rule's limit (`afterMs` after the last sign of life): its
   * host keeps these deadlines, as only the shortest limit decides the device's liveness.
   */
  | { readonly type: "device.overdue"; readonly afterMs: number; readonly at: number }
  /** An event some anomaly rules watch: each rule's baseline is updated and judged. */
  | {
    readonly type: "device.measured"
    readonly at: number
    readonly eventName: string
    readonly data: unknown
    readonly rules: ReadonlyArray<{ readonly id: string } & AnomalyConfig>
  }

export type DeviceEmitted =
  /** Silent for `afterMs` (the shortest limit when it goes offline, a longer one when overdue); `at` = last sign + `afterMs`. */
  | {
    readonly type: "device.offline"
    readonly deviceId: string
    readonly lastSeenAt: number | null
    readonly at: number
    readonly afterMs: number
  }
  | { readonly type: "device.online"; readonly deviceId: string; readonly at: number }
  | {
    readonly type: "device.anomaly"
    readonly deviceId: string
    readonly ruleId: string
    readonly verdict: "breach" | "clear"
    readonly z: number
    readonly at: number
  }

export const deviceMachine = setup({
  types: {
    context: {} as DeviceContext,
    events: {} as DeviceEvent,
    input: {} as { deviceId: string; offlineAfterMs: number | null },
    emitted: {} as DeviceEmitted
  },
  guards: {
    watched: ({ context }) => context.offlineAfterMs !== null && context.lastSeenAt !== null
  },
  delays: {
    /** What is left of `offlineAfterMs` since the last sign of life, measured from `timerFrom`. */
    OFFLINE_AFTER: ({ context }) =>
      Math.max(0, (context.lastSeenAt ?? 0) + (context.offlineAfterMs ?? 0) - (context.timerFrom ?? context.lastSeenAt ?? 0))
  },
  actions: {
    recordSeen: assign(({ event }) =>
      event.type === "device.seen" ? { lastSeenAt: event.at, timerFrom: Math.max(event.at, event.toldAt ?? event.at) } : {}
    ),
    recordConfig: assign(({ event }) =>
      event.type === "device.configured" ? { offlineAfterMs: event.offlineAfterMs, timerFrom: event.at } : {}
    ),
    recordResume: assign(({ event }) => (event.type === "device.resumed" ? { timerFrom: event.at } : {})),
    announceOffline: emit(({ context }) => ({
      type: "device.offline" as const,
      deviceId: context.deviceId,
      lastSeenAt: context.lastSeenAt,
      at: (context.lastSeenAt ?? 0) + (context.offlineAfterMs ?? 0),
      afterMs: context.offlineAfterMs ?? 0
    })),
    announceOverdue: emit(({ context, event }) => {
      const afterMs = event.type === "device.overdue" ? event.afterMs : 0
      return { type: "device.offline" as const, deviceId: context.deviceId, lastSeenAt: context.lastSeenAt, at: (context.lastSeenAt ?? 0) + afterMs, afterMs }
    }),
    announceOnline: emit(({ context, event }) => ({ type: "device.online" as const, deviceId: context.deviceId, at: event.at })),
    measure: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== "device.measured") return
      const baselines = { ...context.baselines }
      for (const rule of event.rules) {
        const step = anomalyStep(rule, baselines[rule.id] ?? [], event.eventName, event.data)
        baselines[rule.id] = step.history
        if (step.verdict !== "none") {
          enqueue.emit({
            type: "device.anomaly",
            deviceId: context.deviceId,
            ruleId: rule.id,
            verdict: step.verdict,
            z: step.z ?? 0,
            at: event.at
          })
        }
      }
      enqueue.assign({ baselines })
    })
  }
}).createMachine({
  id: "device",
  context: ({ input }) => ({
    deviceId: input.deviceId,
    lastSeenAt: null,
    offlineAfterMs: input.offlineAfterMs,
    timerFrom: null,
    baselines: {}
  }),
  // Baselines are kept whatever the liveness state.
  on: { "device.measured": { actions: "measure" } },
  initial: "unknown",
  states: {
    unknown: {
      on: {
        "device.seen": { target: "routing", actions: "recordSeen" },
        "device.configured": { actions: "recordConfig" }
      }
    },
    routing: {
      always: [{ guard: "watched", target: "online" }, { target: "unwatched" }]
    },
    online: {
      after: { OFFLINE_AFTER: { target: "offline", actions: "announceOffline" } },
      on: {
        "device.seen": { target: "routing", reenter: true, actions: "recordSeen" },
        "device.configured": { target: "routing", reenter: true, actions: "recordConfig" },
        "device.resumed": { target: "routing", reenter: true, actions: "recordResume" }
      }
    },
    unwatched: {
      on: {
        "device.seen": { target: "routing", actions: "recordSeen" },
        "device.configured": { target: "routing", actions: "recordConfig" }
      }
    },
    offline: {
      on: {
        "device.seen": { target: "routing", actions: ["recordSeen", "announceOnline"] },
        "device.configured": { actions: "recordConfig" },
        "device.overdue": { actions: "announceOverdue" }
      }
    }
  }
})
