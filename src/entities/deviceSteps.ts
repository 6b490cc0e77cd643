import { createActor, type EventObject, type ExecutableActionObject, type Snapshot, type SnapshotFrom } from "xstate"
import { type DeviceEmitted, type DeviceEvent, deviceMachine } from "../../actors/deviceMachine.ts"

/**
 * A hosted device's `deviceMachine` as its snapshot, stepped by the machine's own `transition`,
 * without an XState actor per device. The machine decides everything as before; what an actor
 * would do with the actions a step returns is done by the host (`deviceHost.ts`): a delayed
 * raise is the offline timer (a deadline the bucket wakes up for), a cancel clears it, an emit is
 * collected.
 *
 * Why: an actor (its system, mailbox, observers and scope) costs about 4.7 KB of heap, against
 * about 0.75 KB for the snapshot, and a bucket host holds ~1,600 devices. With 100,000 hosted
 * devices that was ~470 MB that every major GC marks, on the thread that also fires the offline
 * alerts. A step through one shared scope also costs less CPU than `actor.send` (measured
 * 6.5 µs against 9–10 µs for a sign of life; 9 µs against 18 µs to create and start).
 */

export type DeviceSnapshot = SnapshotFrom<typeof deviceMachine>

/** A delayed event the machine raised (its `after` timer): fired back into it at its deadline. */
export interface Raised {
  readonly id: string | undefined
  readonly event: EventObject
  readonly delay: number
}

/** What one step did besides its next snapshot, in order: timers set and cleared, events emitted. */
export type StepEffect =
  | { readonly type: "raised"; readonly raised: Raised }
  | { readonly type: "cancelled"; readonly id: string }
  | { readonly type: "emitted"; readonly event: DeviceEmitted }

export interface DeviceSteps {
  readonly initial: (input: { readonly deviceId: string; readonly offlineAfterMs: number | null }) => DeviceSnapshot
  /** A snapshot as stored (`persisted`). */
  readonly restore: (stored: Snapshot<unknown>) => DeviceSnapshot
  /** The machine's next snapshot for `event`, with what the step did outside it. */
  readonly step: (snapshot: DeviceSnapshot, event: DeviceEvent | Raised["event"]) => readonly [DeviceSnapshot, ReadonlyArray<StepEffect>]
}

/** What a row stores of a device's snapshot (`device_actors.snapshot`). */
export const persisted = (snapshot: DeviceSnapshot): Snapshot<unknown> => deviceMachine.getPersistedSnapshot(snapshot)

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> => typeof value === "object" && value !== null
const isEvent = (value: unknown): value is EventObject => isRecord(value) && typeof value.type === "string"

export const makeDeviceSteps = (): DeviceSteps => {
  // The scope the machine steps in: an actor that is never started, whose system is never used
  // (the timers are the host's, not the system's scheduler).
  const inert = createActor(deviceMachine, { input: { deviceId: "", offlineAfterMs: null } })
  let effects: Array<StepEffect> = []
  const scope: Parameters<typeof deviceMachine.transition>[2] = {
    self: inert,
    id: "",
    sessionId: "",
    logger: () => {},
    defer: (fn) => fn(),
    // An emit action's own `exec` calls this, typed as the machine's emitted events.
    emit: (event) => {
      effects.push({ type: "emitted", event })
    },
    system: inert.system,
    stopChild: () => {},
    actionExecutor: (action: ExecutableActionObject) => {
      const params = action.params
      if (action.type === "xstate.emit") action.exec?.(action.info, params)
      else if (action.type === "xstate.raise" && isRecord(params) && typeof params.delay === "number" && isEvent(params.event)) {
        effects.push({ type: "raised", raised: { id: typeof params.id === "string" ? params.id : undefined, event: params.event, delay: params.delay } })
      } else if (action.type === "xstate.cancel" && isRecord(params) && typeof params.sendId === "string") {
        effects.push({ type: "cancelled", id: params.sendId })
      } else if (action.type !== "xstate.raise") {
        throw new Error(`deviceMachine: the host does not perform ${action.type}`)
      }
    }
  }
  const collected = (snapshot: DeviceSnapshot): readonly [DeviceSnapshot, ReadonlyArray<StepEffect>] => {
    const out = effects
    effects = []
    return [snapshot, out]
  }
  return {
    initial: (input) => collected(deviceMachine.getInitialSnapshot(scope, input))[0],
    restore: (stored) => collected(deviceMachine.restoreSnapshot(stored, scope))[0],
    // A raised timer event is the machine's own (`xstate.after…`), not one of `DeviceEvent`.
    step: (snapshot, event) => collected(deviceMachine.transition(snapshot, event as DeviceEvent, scope))
  }
}
