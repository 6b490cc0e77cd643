import { createActor } from "xstate"
import { type DeviceEmitted, type DeviceEvent, deviceMachine } from "../../actors/deviceMachine.ts"
import { countActivated, countPassivated } from "../metrics.ts"
import { makeDeadlines } from "./deadlines.ts"
import { alertIntents } from "./deviceAlerts.ts"
import { type DeviceHost, type Effects, HostedDevice, livenessOf, type SeenEventValue, type Timer } from "./hostedDevice.ts"
import { applies, offlineAfterMs, type OrganisationRules, type Rule } from "./rules.ts"

export { type Activation, type DeviceHost, type Effects, HostedDevice, type Liveness, livenessOf } from "./hostedDevice.ts"

const emptyEffects = (): Effects => ({ wake: null, alerts: [], liveness: new Map() })

/**
 * The devices of one bucket, each hosting its `deviceMachine`, without I/O: what happens
 * outside (deadlines to keep, alerts to raise and clear, rows to store) is collected as
 * `Effects` for the entity to perform. Time is given (`now`, `at`), so tests drive it.
 *
 * - The machine's offline timer (XState's clock) is a deadline. The host reports the earliest
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
export const makeDeviceHost = (rulesOf: (organisationId: string) => OrganisationRules | undefined): DeviceHost => {
  const devices = new Map<string, HostedDevice>()
  const unsynced = new Set<HostedDevice>()
  const deadlines = makeDeadlines<Timer>((t) => t.device.timer === t && devices.get(t.device.id) === t.device, () => devices.size)
  let effects = emptyEffects()
  const emitted: Array<DeviceEmitted> = []
  let current: HostedDevice | undefined
  let currentEvent: SeenEventValue | undefined
  const clock = {
    setTimeout: (fire: () => void, ms: number): Timer => {
      if (current === undefined) throw new Error("device host: a timer outside a step")
      const timer: Timer = { fire, ms, device: current, deadline: Number.NaN }
      current.timer = timer
      return timer
    },
    clearTimeout: (timer: Timer) => {
      if (timer.device.timer === timer) timer.device.timer = undefined
    }
  }
  const sink = (e: DeviceEmitted) => {
    emitted.push(e)
  }

  const rulesFor = (device: HostedDevice) => rulesOf(device.place.organisationId)?.rules ?? []

  const alerts = alertIntents((intent) => effects.alerts.push(intent))

  /** Whatever a step of the machine did: its emissions, its timer's deadline, its liveness. */
  const settle = (device: HostedDevice, at: number) => {
    for (const e of emitted.splice(0)) {
      if (e.type !== "device.anomaly") at = e.at
      alerts.emitted(device, rulesFor(device), e, currentEvent)
    }
    const snapshot = device.actor.getSnapshot()
    const timer = device.timer
    if (timer !== undefined && Number.isNaN(timer.deadline)) {
      // The machine counts what is left from `timerFrom`.
      timer.deadline = (snapshot.context.timerFrom ?? at) + timer.ms
      if (effects.wake === null || timer.deadline < effects.wake) effects.wake = timer.deadline
      deadlines.add(timer)
    }
    device.wakeAt = timer === undefined ? null : timer.deadline
    if (device.wakeAt !== device.storedWakeAt) unsynced.add(device)
    const liveness = livenessOf(snapshot.value)
    if (liveness !== device.planned) effects.liveness.set(device, { liveness, at })
    else effects.liveness.delete(device)
  }

  const tell = (device: HostedDevice, event: DeviceEvent, now: number) => {
    current = device
    try {
      device.actor.send(event)
    } finally {
      current = undefined
    }
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
    if (device.actor.getSnapshot().context.offlineAfterMs === limit) return
    catchUp(device)
    tell(device, { type: "device.configured", offlineAfterMs: limit, at: now }, now)
  }

  const fire = (device: HostedDevice, timer: Timer) => {
    device.timer = undefined
    current = device
    try {
      timer.fire()
    } finally {
      current = undefined
    }
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
    const told = device.actor.getSnapshot().context.lastSeenAt
    return device.noted !== null && (told === null || device.noted > told) ? device.noted : told
  }

  return {
    devices,
    activate: (a, now) => {
      const restored = a.snapshot !== null && a.snapshot !== undefined
      const held = rulesOf(a.place.organisationId)
      const input = { deviceId: a.deviceId, offlineAfterMs: held === undefined ? null : offlineAfterMs(held.rules, a.place) }
      const actor = restored ? createActor(deviceMachine, { input, clock, snapshot: a.snapshot as never }) : createActor(deviceMachine, { input, clock })
      actor.on("*", sink)
      actor.start()
      const device = new HostedDevice(a.deviceId, actor, a.place, a.wakeAt, a.liveness, a.livenessAt, [...a.raised], now)
      devices.set(a.deviceId, device)
      countActivated()
      if (restored) configure(device, now)
      else device.rulesVersion = held?.version ?? -1
      // Signs of life never told (noted, or lost on the way) are in the device's row.
      const told = actor.getSnapshot().context.lastSeenAt
      if (a.lastSeenAt !== null && (told === null || a.lastSeenAt > told)) tell(device, { type: "device.seen", at: a.lastSeenAt }, now)
      // Timers survive: the deadline restarts for what is left of it.
      if (actor.getSnapshot().value === "online" && device.timer === undefined) tell(device, { type: "device.resumed", at: now }, now)
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
        const value = device.actor.getSnapshot().value
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
      const value = device.actor.getSnapshot().value
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
      const value = String(device.actor.getSnapshot().value)
      return { deviceId: device.id, state: value, isOnline: value === "online", lastSeenAt: lastSeenOf(device) }
    },
    forget: (deviceId) => {
      const device = devices.get(deviceId)
      if (device === undefined) return
      device.actor.stop()
      devices.delete(deviceId)
      unsynced.delete(device)
      countPassivated()
    },
    unsynced,
    sweep: (before) => {
      const gone: Array<HostedDevice> = []
      for (const d of devices.values()) {
        if (d.lastActiveAt >= before || d.timer !== undefined || d.wakeAt !== null || d.dirty || d.pending > 0) continue
        if (d.actor.getSnapshot().value === "online" || livenessOf(d.actor.getSnapshot().value) !== d.reported) continue
        gone.push(d)
      }
      for (const d of gone) {
        d.actor.stop()
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
