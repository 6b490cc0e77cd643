import type { Snapshot } from "xstate"
import type { DeviceEmitted, DeviceEvent } from "../../actors/deviceMachine.ts"
import { countActivated, countPassivated } from "../metrics.ts"
import { makeDeadlines } from "./deadlines.ts"
import { alertIntents } from "./deviceAlerts.ts"
import { makeDeviceSteps, type Raised } from "./deviceSteps.ts"
import { type DeviceHost, type Effects, HostedDevice, livenessOf, OVERDUE, type SeenEventValue, type Timer } from "./hostedDevice.ts"
import { applies, nextOfflineLimitMs, offlineAfterMs, type OrganisationRules, type Rule } from "./rules.ts"

export { type Activation, type DeviceHost, type Effects, HostedDevice, type Liveness, livenessOf } from "./hostedDevice.ts"

const emptyEffects = (): Effects => ({ wake: null, alerts: [], liveness: new Map() })

/**
 * The devices of one bucket, each hosting its `deviceMachine` (as a snapshot the machine steps,
 * `deviceSteps.ts`), without I/O: what happens
 * outside (deadlines to keep, alerts to raise and clear, rows to store) is collected as
 * `Effects` for the entity to perform. Time is given (`now`, `at`), so tests drive it.
 *
 * - The machine's offline timer (its delayed raise) is a deadline. The host reports the earliest
 *   deadline set in a step (`drain().wake`) and the earliest one held (`nextDeadline`): the
 *   bucket sets its own timer for it, for all its devices at once. A later sign of life moves
 *   the deadline but reports nothing: the timer fires, finds the device not due (once told the
 *   sign), and is set for the next one.
 * - A plain sign of life (no rule looks at its event) of a device the machine would move no
 *   further than its `lastSeenAt` (online or unwatched) is only noted, without stepping the
 *   machine; the machine is told the newest one before anything else reaches it and before
 *   its deadline fires (seen before the deadline: the deadline moves; only after it: the device
 *   was offline in between, and goes offline, then online).
 * - Rules are re-derived whenever the rules held for the organisation changed version.
 */
/** A stored snapshot (`device_actors.snapshot`, parsed JSON): the machine restores it. */
const isStored = (value: unknown): value is Snapshot<unknown> => typeof value === "object" && value !== null && "status" in value

export const makeDeviceHost = (rulesOf: (organisationId: string) => OrganisationRules | undefined): DeviceHost => {
  const devices = new Map<string, HostedDevice>()
  const unsynced = new Set<HostedDevice>()
  const deadlines = makeDeadlines<Timer>((t) => t.device.timer === t && devices.get(t.device.id) === t.device, () => devices.size)
  const steps = makeDeviceSteps()
  let effects = emptyEffects()
  const emitted: Array<DeviceEmitted> = []
  let currentEvent: SeenEventValue | undefined

  const rulesFor = (device: HostedDevice) => rulesOf(device.place.organisationId)?.rules ?? []

  const alerts = alertIntents((intent) => effects.alerts.push(intent))

  /**
   * Offline with a longer offline rule to come: a timer of the host's for its limit (the machine
   * times only the shortest, which decides the device's liveness), fired into the machine as
   * `device.overdue`, which tells that limit as `device.offline`.
   */
  const armOverdue = (device: HostedDevice) => {
    const { lastSeenAt, offlineAfterMs } = device.snapshot.context
    if (device.snapshot.value !== "offline" || device.timer !== undefined || lastSeenAt === null) return
    const next = nextOfflineLimitMs(rulesFor(device), device.place, device.overdueMs ?? offlineAfterMs ?? 0)
    if (next === null) return
    const deadline = lastSeenAt + next
    const overdue: DeviceEvent = { type: "device.overdue", afterMs: next, at: deadline }
    const timer: Timer = { raised: { id: OVERDUE, event: overdue, delay: 0 }, device, deadline }
    device.timer = timer
    if (effects.wake === null || deadline < effects.wake) effects.wake = deadline
    deadlines.add(timer)
  }

  /** Whatever a step of the machine did: its emissions, its timer's deadline, its liveness. */
  const settle = (device: HostedDevice, at: number) => {
    for (const emittedEvent of emitted.splice(0)) {
      let e = emittedEvent
      if (e.type === "device.offline") {
        device.overdueMs = Math.max(device.overdueMs ?? 0, e.afterMs)
        device.offlineAt = Math.max(device.offlineAt ?? e.at, e.at)
      } else if (e.type === "device.online" && device.offlineAt !== null && e.at < device.offlineAt) {
        e = { ...e, at: device.offlineAt }
      }
      if (e.type !== "device.anomaly") at = e.at
      alerts.emitted(device, rulesFor(device), e, currentEvent)
    }
    const snapshot = device.snapshot
    if (snapshot.value !== "offline") {
      device.overdueMs = null
      device.offlineAt = null
    }
    const timer = device.timer
    if (timer !== undefined && Number.isNaN(timer.deadline)) {
      // The machine counts what is left from `timerFrom`.
      timer.deadline = (snapshot.context.timerFrom ?? at) + timer.raised.delay
      if (effects.wake === null || timer.deadline < effects.wake) effects.wake = timer.deadline
      deadlines.add(timer)
    }
    armOverdue(device)
    device.wakeAt = device.timer === undefined ? null : device.timer.deadline
    if (device.wakeAt !== device.storedWakeAt) unsynced.add(device)
    const liveness = livenessOf(snapshot.value)
    if (liveness === device.planned) {
      effects.liveness.delete(device)
      return
    }
    // As of when the device took it: a later settle of the same step that changed nothing (an
    // activation's last, at `now`) keeps that time. And never before the liveness it follows: its
    // space keeps the later of two (`spaceMachine.ts`), so an offline dated at its deadline (the
    // last sign + the limit) after an online dated at a late step would never be counted.
    const taken = effects.liveness.get(device)
    if (taken === undefined || taken.liveness !== liveness) effects.liveness.set(device, { liveness, at: Math.max(at, device.plannedAt) })
  }

  /** One step of the device's machine; its timer set or cleared and its emissions collected, as an actor would. */
  const step = (device: HostedDevice, event: DeviceEvent | Raised["event"]) => {
    const [next, done] = steps.step(device.snapshot, event)
    device.snapshot = next
    // Back online (or no longer watched): the longer limits wait for the next silence.
    if (device.timer?.raised.id === OVERDUE && next.value !== "offline") device.timer = undefined
    for (const effect of done) {
      if (effect.type === "emitted") emitted.push(effect.event)
      else if (effect.type === "raised") device.timer = { raised: effect.raised, device, deadline: Number.NaN }
      else if (device.timer !== undefined && device.timer.raised.id === effect.id) device.timer = undefined
    }
  }

  const tell = (device: HostedDevice, event: DeviceEvent, now: number) => {
    step(device, event)
    settle(device, "at" in event ? event.at : now)
  }

  /** Tells the machine the sign of life noted for it, if any. */
  const catchUp = (device: HostedDevice) => {
    const at = device.noted
    if (at === null) return
    device.noted = null
    tell(device, { type: "device.seen", at }, at)
  }

  const configure = (device: HostedDevice, now: number) => {
    const held = rulesOf(device.place.organisationId)
    if (held === undefined || held.version === device.rulesVersion) return
    device.rulesVersion = held.version
    const limit = offlineAfterMs(held.rules, device.place)
    // Offline: the longer limits are those of the rules as they are now.
    if (device.timer?.raised.id === OVERDUE) device.timer = undefined
    if (device.snapshot.context.offlineAfterMs === limit) return settle(device, now)
    catchUp(device)
    tell(device, { type: "device.configured", offlineAfterMs: limit, at: now }, now)
  }

  const fire = (device: HostedDevice, timer: Timer) => {
    device.timer = undefined
    step(device, timer.raised.event)
    settle(device, timer.deadline)
  }

  const expire = (device: HostedDevice, now: number) => {
    let timer = device.timer
    while (timer !== undefined && timer.deadline <= now) {
      // Seen before the deadline: it moves. Seen only after it: offline in between, then online.
      if (device.noted !== null && device.noted <= timer.deadline) catchUp(device)
      else fire(device, timer)
      timer = device.timer
    }
    catchUp(device)
  }

  const fireDue = (device: HostedDevice, now: number) => {
    if (device.timer !== undefined && device.timer.deadline <= now && devices.get(device.id) === device) expire(device, now)
  }

  const lastSeenOf = (device: HostedDevice) => {
    const told = device.snapshot.context.lastSeenAt
    return device.noted !== null && (told === null || device.noted > told) ? device.noted : told
  }

  return {
    devices,
    activate: (a, now) => {
      const stored = isStored(a.snapshot) ? a.snapshot : undefined
      const held = rulesOf(a.place.organisationId)
      const snapshot = stored !== undefined
        ? steps.restore(stored)
        : steps.initial({ deviceId: a.deviceId, offlineAfterMs: held === undefined ? null : offlineAfterMs(held.rules, a.place) })
      const device = new HostedDevice(a.deviceId, snapshot, a.place, a.wakeAt, a.liveness, a.livenessAt, [...a.raised], now)
      devices.set(a.deviceId, device)
      countActivated()
      if (stored !== undefined) configure(device, now)
      else device.rulesVersion = held?.version ?? -1
      // Signs of life never told (noted, or lost on the way) are in the device's row.
      const told = device.snapshot.context.lastSeenAt
      if (a.lastSeenAt !== null && (told === null || a.lastSeenAt > told)) tell(device, { type: "device.seen", at: a.lastSeenAt }, now)
      // Timers survive: the deadline restarts for what is left of it.
      if (device.snapshot.value === "online" && device.timer === undefined) tell(device, { type: "device.resumed", at: now }, now)
      settle(device, now)
      return device
    },
    seen: (device, at, event, now) => {
      // As of the sign: one told late (a backlog) does not keep the device in memory longer.
      device.lastActiveAt = Math.min(at, now)
      configure(device, now)
      const thresholds: Array<Rule> = []
      const anomalies: Array<Rule> = []
      if (event !== undefined) {
        for (const rule of rulesFor(device)) {
          if (rule.type === "offline" || rule.config.eventName !== event.name || !applies(rule, device.place)) continue
          if (rule.type === "anomaly") anomalies.push(rule)
          else thresholds.push(rule)
        }
      }
      const latest = lastSeenOf(device)
      if (latest === null || at > latest) {
        // The noted sign kept the device alive up to its deadline, this one comes after it: told
        // first, so that only a real gap between two signs counts as offline.
        if (device.noted !== null && device.timer !== undefined && at > device.timer.deadline) catchUp(device)
        const value = device.snapshot.value
        if (anomalies.length === 0 && (value === "online" || value === "unwatched")) device.noted = at
        else {
          device.noted = null
          tell(device, { type: "device.seen", at }, at)
        }
      }
      if (event === undefined) return
      alerts.thresholds(device, thresholds, event, at)
      if (anomalies.length === 0) return
      catchUp(device)
      currentEvent = event
      try {
        tell(device, {
          type: "device.measured",
          at,
          eventName: event.name,
          data: event.data,
          rules: anomalies.map((r) => ({
            id: r.id,
            eventName: event.name,
            path: typeof r.config.path === "string" ? r.config.path : undefined,
            window: Number(r.config.window),
            zScore: Number(r.config.zScore)
          }))
        }, now)
      } finally {
        currentEvent = undefined
      }
      device.dirty = true
    },
    wake: (now) => {
      for (const t of deadlines.due(now)) fireDue(t.device, now)
    },
    fireDue,
    nextDeadline: deadlines.earliest,
    due: (now) => deadlines.due(now).map((t) => t.device),
    caughtUp: (device, lastSeenAt) => {
      const latest = lastSeenOf(device)
      if (lastSeenAt === null || (latest !== null && lastSeenAt <= latest)) return
      const value = device.snapshot.value
      const timer = device.timer
      // The row keeps only the newest sign: one after the deadline shows no gap (the signs before
      // it may never have reached this owner), so it moves the deadline, as at activation. Only
      // signs told to this owner (noted) show a gap.
      const gapShown = device.noted !== null && timer !== undefined && device.noted > timer.deadline
      if ((value === "online" || value === "unwatched") && (timer === undefined || lastSeenAt <= timer.deadline || gapShown)) device.noted = lastSeenAt
      else {
        catchUp(device)
        tell(device, { type: "device.seen", at: lastSeenAt }, lastSeenAt)
      }
    },
    configure,
    live: (device) => {
      const value = String(device.snapshot.value)
      return { deviceId: device.id, state: value, isOnline: value === "online", lastSeenAt: lastSeenOf(device) }
    },
    forget: (deviceId) => {
      const device = devices.get(deviceId)
      if (device === undefined) return
      devices.delete(deviceId)
      unsynced.delete(device)
      countPassivated()
    },
    unsynced,
    sweep: (before) => {
      const gone: Array<HostedDevice> = []
      for (const d of devices.values()) {
        if (d.lastActiveAt >= before || d.timer !== undefined || d.wakeAt !== null || d.dirty || d.pending > 0) continue
        if (d.snapshot.value === "online" || livenessOf(d.snapshot.value) !== d.reported) continue
        gone.push(d)
      }
      for (const d of gone) {
        devices.delete(d.id)
        unsynced.delete(d)
      }
      countPassivated(gone.length)
      return gone
    },
    drain: () => {
      const out = effects
      effects = emptyEffects()
      return out
    }
  }
}
