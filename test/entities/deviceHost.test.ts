import { describe, expect, it } from "vitest"
import { createActor } from "xstate"
import { liveOf, spaceMachine } from "../../actors/spaceMachine.ts"
import { type Activation, type DeviceHost, type HostedDevice, makeDeviceHost } from "../../src/entities/deviceHost.ts"
import { persisted } from "../../src/entities/deviceSteps.ts"
import type { OrganisationRules, Rule } from "../../src/entities/rules.ts"

const T0 = Date.parse("2026-01-01T00:00:00Z")
const AFTER = 30_000
const ORG = "org_1"

const rule = (id: string, type: Rule["type"], config: Record<string, unknown>, extra: Partial<Rule> = {}): Rule => ({
  id,
  organisationId: ORG,
  name: id,
  type,
  autoResolve: false,
  config,
  productId: null,
  spaceId: null,
  ...extra
})

/** A host whose organisation's rules the test sets (a new version each time, as a reload gives). */
const hostWith = (initial: ReadonlyArray<Rule>) => {
  let held: OrganisationRules = { version: 1, rules: initial, readAt: T0 }
  const host = makeDeviceHost((id) => (id === ORG ? held : undefined))
  return {
    host,
    setRules: (rules: ReadonlyArray<Rule>) => {
      held = { version: held.version + 1, rules, readAt: T0 }
    }
  }
}

const fresh = (deviceId: string, extra: Partial<Activation> = {}): Activation => ({
  deviceId,
  place: { organisationId: ORG, spaceId: "spc_1", productId: null },
  lastSeenAt: null,
  snapshot: null,
  wakeAt: null,
  liveness: "other",
  livenessAt: 0,
  raised: [],
  ...extra
})

/** Stores what the entity would store after performing a drain: liveness as told (planned, then written), snapshot. */
const stored = (host: DeviceHost, device: HostedDevice) => {
  const fx = host.drain()
  const change = fx.liveness.get(device)
  if (change !== undefined) {
    device.planned = device.reported = change.liveness
    device.plannedAt = device.reportedAt = change.at
  }
  return { fx, snapshot: persisted(device.snapshot), wakeAt: device.wakeAt, liveness: device.reported, livenessAt: device.reportedAt }
}

/**
 * The device's space, told each drain's liveness change as its bucket tells it (`Changes`):
 * what it counts is what `GET /spaces` answers.
 */
const spaceOf = (deviceId: string) => {
  const space = createActor(spaceMachine, {
    input: { spaceId: "spc_1", timezone: "UTC", devices: [{ deviceId, liveness: "other", at: 0 }] }
  }).start()
  return {
    tell: (host: DeviceHost, device: HostedDevice) => {
      const { fx } = stored(host, device)
      const change = fx.liveness.get(device)
      if (change !== undefined) space.send({ type: "changes", devices: [{ deviceId, ...change }], alerts: [] })
      return change
    },
    live: () => liveOf(space.getSnapshot().context)
  }
}

const offlineRule = rule("rul_off", "offline", { afterSeconds: AFTER / 1000 }, { autoResolve: true })

describe("device host: the machine's offline timer as deadlines the bucket wakes up for", () => {
  it("reports a deadline once per offline period, not once per sign of life", () => {
    const { host } = hostWith([offlineRule])
    const device = host.activate(fresh("d1"), T0)
    expect(host.drain().wake).toBeNull()
    host.seen(device, T0, undefined, T0)
    const first = host.drain()
    expect(first.wake).toBe(T0 + AFTER)
    expect(first.liveness.get(device)).toEqual({ liveness: "online", at: T0 })
    device.planned = device.reported = "online"
    host.seen(device, T0 + 10_000, undefined, T0 + 10_000)
    host.seen(device, T0 + 20_000, undefined, T0 + 20_000)
    expect(host.drain()).toMatchObject({ wake: null, alerts: [] })
    expect(host.live(device)).toMatchObject({ state: "online", isOnline: true, lastSeenAt: T0 + 20_000 })

    // The first wake-up finds the deadline moved and asks for it.
    host.wake(T0 + AFTER)
    const early = host.drain()
    expect(early).toMatchObject({ wake: T0 + 20_000 + AFTER, alerts: [] })
    expect(early.liveness.size).toBe(0)

    host.wake(T0 + 20_000 + AFTER + 200)
    const due = host.drain()
    expect(due.wake).toBeNull()
    expect(due.alerts).toMatchObject([{ _tag: "raise", deviceId: "d1", key: `offline@${T0 + 20_000 + AFTER}`, at: T0 + 20_000 + AFTER, event: null }])
    expect(due.liveness.get(device)).toEqual({ liveness: "offline", at: T0 + 20_000 + AFTER })
    expect(host.live(device)).toMatchObject({ state: "offline", isOnline: false })

    // Back: online again, the auto-resolving rule's alert is cleared, a new period starts.
    device.planned = device.reported = "offline"
    host.seen(device, T0 + 90_000, undefined, T0 + 90_000)
    const back = host.drain()
    expect(back.alerts).toMatchObject([{ _tag: "clear", key: `online@${T0 + 90_000}` }])
    expect(back.wake).toBe(T0 + 90_000 + AFTER)
    expect(back.liveness.get(device)).toEqual({ liveness: "online", at: T0 + 90_000 })
  })

  it("two offline rules: each raises at its own limit, the longer one while the device stays offline, and both clear when it is back", () => {
    const longer = rule("rul_off_long", "offline", { afterSeconds: (3 * AFTER) / 1000 }, { autoResolve: true })
    const { host } = hostWith([offlineRule, longer])
    const device = host.activate(fresh("dl"), T0)
    host.seen(device, T0, undefined, T0)
    expect(host.drain().wake).toBe(T0 + AFTER)
    device.planned = device.reported = "online"

    host.wake(T0 + AFTER)
    const first = host.drain()
    expect(first.alerts.map((a) => [a._tag, a.rule.id, a.key])).toEqual([["raise", "rul_off", `offline@${T0 + AFTER}`]])
    // The longer rule's limit is the next deadline; the device is offline from the shorter one.
    expect(first.wake).toBe(T0 + 3 * AFTER)
    expect(host.live(device)).toMatchObject({ state: "offline", isOnline: false })
    device.planned = device.reported = "offline"
    host.wake(T0 + 2 * AFTER)
    expect(host.drain().alerts).toEqual([])

    host.wake(T0 + 3 * AFTER + 50)
    const second = host.drain()
    expect(second.alerts.map((a) => [a._tag, a.rule.id, a.key, a.at])).toEqual([["raise", "rul_off_long", `offline@${T0 + 3 * AFTER}`, T0 + 3 * AFTER]])
    expect(second.liveness.size).toBe(0)
    expect(host.nextDeadline()).toBeUndefined()

    host.seen(device, T0 + 4 * AFTER, undefined, T0 + 4 * AFTER)
    const back = host.drain()
    expect(back.alerts.map((a) => [a._tag, a.rule.id])).toEqual([["clear", "rul_off"], ["clear", "rul_off_long"]])
    expect(back.wake).toBe(T0 + 5 * AFTER)
  })

  it("back before the longer limit: the longer rule raises nothing, and its deadline is gone", () => {
    const longer = rule("rul_off_long", "offline", { afterSeconds: (3 * AFTER) / 1000 }, { autoResolve: true })
    const { host } = hostWith([offlineRule, longer])
    const device = host.activate(fresh("dm"), T0)
    host.seen(device, T0, undefined, T0)
    host.wake(T0 + AFTER)
    expect(host.drain().alerts.map((a) => a.rule.id)).toEqual(["rul_off"])
    host.seen(device, T0 + 1.5 * AFTER, undefined, T0 + 1.5 * AFTER)
    // Online again: every offline rule's alert that may be open is cleared (one never raised clears nothing).
    expect(host.drain().alerts.map((a) => a._tag)).toEqual(["clear", "clear"])
    // Only the shorter rule's deadline of the new period is held.
    expect(host.nextDeadline()).toBe(T0 + 2.5 * AFTER)
    host.wake(T0 + 2.4 * AFTER)
    expect(host.drain().alerts).toEqual([])
  })

  it("offline at the shorter limit when its owner moved: the new owner raises the longer rule at its limit", () => {
    const longer = rule("rul_off_long", "offline", { afterSeconds: (3 * AFTER) / 1000 })
    const first = hostWith([offlineRule, longer]).host
    const before = first.activate(fresh("dn"), T0)
    first.seen(before, T0, undefined, T0)
    first.wake(T0 + AFTER)
    const row = stored(first, before)
    // The row holds the longer limit as the device's deadline, for whoever owns it next.
    expect(row.wakeAt).toBe(T0 + 3 * AFTER)

    const { host } = hostWith([offlineRule, longer])
    const late = T0 + 4 * AFTER
    host.activate(fresh("dn", { snapshot: row.snapshot, wakeAt: row.wakeAt, liveness: "offline", livenessAt: T0 + AFTER, lastSeenAt: T0 }), late)
    expect(host.drain().wake).toBe(T0 + 3 * AFTER)
    host.wake(late)
    expect(host.drain().alerts.map((a) => [a.rule.id, a.key])).toEqual([["rul_off_long", `offline@${T0 + 3 * AFTER}`]])
    expect(host.nextDeadline()).toBeUndefined()
  })

  it("a sign dated before the deadline but told after it fired: back online as of the deadline, so the clear resolves the alert", () => {
    const { host } = hostWith([offlineRule])
    const device = host.activate(fresh("dp"), T0)
    host.seen(device, T0, undefined, T0)
    host.drain()
    device.planned = device.reported = "online"
    // The owner read the device's row before the sign's commit: offline at the deadline.
    host.wake(T0 + AFTER + 1)
    expect(host.drain().alerts).toMatchObject([{ _tag: "raise", at: T0 + AFTER }])
    device.planned = device.reported = "offline"
    host.seen(device, T0 + AFTER - 5, undefined, T0 + AFTER + 400)
    const back = host.drain()
    // Not older than the alert it clears (an alert slot turns away a clear older than its alert).
    expect(back.alerts).toMatchObject([{ _tag: "clear", at: T0 + AFTER }])
    expect(host.live(device)).toMatchObject({ state: "online", lastSeenAt: T0 + AFTER - 5 })
    expect(back.wake).toBe(T0 + 2 * AFTER - 5)
  })

  it("fires one device's due deadline at a time, and none of a device forgotten meanwhile", () => {
    const { host } = hostWith([offlineRule])
    const [a, b, c] = ["da", "db", "dc"].map((id) => host.activate(fresh(id), T0))
    for (const d of [a, b, c]) host.seen(d, T0, undefined, T0)
    host.drain()
    const due = host.due(T0 + AFTER)
    expect(due.map((d) => d.id).sort()).toEqual(["da", "db", "dc"])
    host.forget("dc")
    for (const d of [a, c]) host.fireDue(d, T0 + AFTER)
    const fx = host.drain()
    expect(fx.alerts.map((x) => x.deviceId)).toEqual(["da"])
    expect(host.live(a).state).toBe("offline")
    expect(host.live(b).state).toBe("online")
    host.fireDue(b, T0 + AFTER)
    expect(host.drain().alerts.map((x) => x.deviceId)).toEqual(["db"])
  })

  it("a sign of life noted after the deadline (late wake-up): offline at the deadline, then online", () => {
    const { host } = hostWith([offlineRule])
    const device = host.activate(fresh("d2"), T0)
    host.seen(device, T0, undefined, T0)
    stored(host, device)
    host.seen(device, T0 + AFTER + 5_000, undefined, T0 + AFTER + 5_000)
    host.wake(T0 + AFTER + 6_000)
    const fx = host.drain()
    expect(fx.alerts.map((a) => a._tag)).toEqual(["raise", "clear"])
    expect(fx.liveness.size).toBe(0) // online before and after
    expect(fx.wake).toBe(T0 + AFTER + 5_000 + AFTER)
  })

  it("signs noted one within the deadline and one after it, before the wake-up: no gap, no offline", () => {
    const { host } = hostWith([offlineRule])
    const device = host.activate(fresh("d2b"), T0)
    host.seen(device, T0, undefined, T0)
    stored(host, device)
    host.seen(device, T0 + AFTER - 1_000, undefined, T0 + AFTER - 1_000)
    host.seen(device, T0 + AFTER + 20, undefined, T0 + AFTER + 20)
    // The first sign was told (the second one came after its deadline): the deadline moved there.
    host.wake(T0 + AFTER + 250)
    const fx = host.drain()
    expect(fx.alerts).toEqual([])
    expect(fx.wake).toBe(T0 + AFTER - 1_000 + AFTER)
    // Then counted from the newest sign.
    host.wake(T0 + AFTER - 1_000 + AFTER)
    expect(host.drain()).toMatchObject({ alerts: [], wake: T0 + AFTER + 20 + AFTER })
  })

  it("a sign read from its row after the deadline (signs lost on the way): no gap shown, no offline", () => {
    const { host } = hostWith([offlineRule])
    const device = host.activate(fresh("d2c"), T0)
    host.seen(device, T0, undefined, T0)
    stored(host, device)
    // Its signs went to an owner that died; the row says it published until just now.
    expect(host.due(T0 + AFTER + 100)).toEqual([device])
    host.caughtUp(device, T0 + AFTER + 80)
    host.wake(T0 + AFTER + 100)
    const fx = host.drain()
    expect(fx.alerts).toEqual([])
    expect(host.nextDeadline()).toBe(T0 + AFTER + 80 + AFTER)
  })

  it("rehydrated from its row, it catches up from last_seen_at, reports its deadline and fires once", () => {
    const first = hostWith([offlineRule]).host
    const before = first.activate(fresh("d3"), T0)
    first.seen(before, T0, undefined, T0)
    const row = stored(first, before)
    expect(row.wakeAt).toBe(T0 + AFTER)

    // The owner moves; the row says seen at T0 + 5 s (a sign noted, never stored in the snapshot).
    const { host } = hostWith([offlineRule])
    const device = host.activate(fresh("d3", { snapshot: row.snapshot, wakeAt: row.wakeAt, liveness: "online", livenessAt: T0, lastSeenAt: T0 + 5_000 }), T0 + 6_000)
    expect(host.drain()).toMatchObject({ wake: T0 + 5_000 + AFTER, alerts: [] })
    expect(host.nextDeadline()).toBe(T0 + 5_000 + AFTER)
    // The earlier owner's wake-up: nothing due.
    host.wake(T0 + AFTER)
    expect(host.drain()).toMatchObject({ wake: null, alerts: [] })
    host.wake(T0 + 5_000 + AFTER + 2_000)
    expect(host.drain().alerts).toMatchObject([{ _tag: "raise", key: `offline@${T0 + 5_000 + AFTER}` }])
    host.wake(T0 + 5_000 + AFTER + 3_000)
    expect(host.drain().alerts).toEqual([])
    expect(device.wakeAt).toBeNull()
    expect(host.nextDeadline()).toBeUndefined()
  })

  it("silent while no owner ran: activated after its deadline, it asks for a wake-up at once and goes offline once", () => {
    const first = hostWith([offlineRule]).host
    const before = first.activate(fresh("d4"), T0)
    first.seen(before, T0, undefined, T0)
    const row = stored(first, before)

    const { host } = hostWith([offlineRule])
    const late = T0 + AFTER + 60_000
    host.activate(fresh("d4", { snapshot: row.snapshot, wakeAt: row.wakeAt, liveness: "online", livenessAt: T0, lastSeenAt: T0 }), late)
    expect(host.drain().wake).toBe(late)
    host.wake(late + 100)
    const fx = host.drain()
    // The offline alert says when the device went silent: the same key as its first owner would have sent.
    expect(fx.alerts).toMatchObject([{ _tag: "raise", key: `offline@${T0 + AFTER}`, at: T0 + AFTER }])
    expect(fx.wake).toBeNull()
  })

  it("activated by its own due wake-up: fires in that step and asks for nothing more", () => {
    const first = hostWith([offlineRule]).host
    const before = first.activate(fresh("d5"), T0)
    first.seen(before, T0, undefined, T0)
    const row = stored(first, before)
    const { host } = hostWith([offlineRule])
    const now = T0 + AFTER + 300
    host.activate(fresh("d5", { snapshot: row.snapshot, wakeAt: row.wakeAt, liveness: "online", livenessAt: T0, lastSeenAt: T0 }), now)
    expect(host.drain().wake).toBeLessThanOrEqual(now)
    host.wake(now)
    const fx = host.drain()
    expect(fx.wake).toBeNull()
    expect(fx.alerts).toHaveLength(1)
  })

  it("rules changed: the deadline follows; without an offline rule the device is no longer watched", () => {
    const { host, setRules } = hostWith([offlineRule])
    const device = host.activate(fresh("d6"), T0)
    host.seen(device, T0, undefined, T0)
    stored(host, device)
    setRules([rule("rul_off", "offline", { afterSeconds: 10 })])
    host.configure(device, T0 + 2_000)
    expect(host.drain().wake).toBe(T0 + 10_000)
    setRules([])
    host.configure(device, T0 + 3_000)
    const fx = host.drain()
    expect(fx.liveness.get(device)).toEqual({ liveness: "other", at: T0 + 3_000 })
    expect(host.live(device).state).toBe("unwatched")
    host.wake(T0 + 10_000)
    expect(host.drain().alerts).toEqual([])
  })

  it("a threshold rule raises per breaching event and clears once, only what it raised, only if it auto-resolves", () => {
    const hot = rule("rul_hot", "threshold", { eventName: "temperature", path: "celsius", max: 80 }, { autoResolve: true })
    const low = rule("rul_low", "threshold", { eventName: "pressure", min: 1 })
    const { host } = hostWith([hot, low])
    const device = host.activate(fresh("d7"), T0)
    const event = (id: string, name: string, data: unknown) => ({ id, name, data, timestamp: T0 })
    host.seen(device, T0, event("e1", "temperature", { celsius: 60 }), T0)
    expect(host.drain().alerts).toEqual([]) // in range, nothing raised: nothing to clear
    host.seen(device, T0 + 1, event("e2", "temperature", { celsius: 85 }), T0 + 1)
    host.seen(device, T0 + 2, event("e3", "temperature", { celsius: 90 }), T0 + 2)
    expect(host.drain().alerts).toMatchObject([
      { _tag: "raise", rule: { id: "rul_hot" }, key: "event:e2", note: "temperature out of range", event: { id: "e2" } },
      { _tag: "raise", key: "event:e3" }
    ])
    host.seen(device, T0 + 3, event("e4", "temperature", { celsius: 50 }), T0 + 3)
    host.seen(device, T0 + 4, event("e5", "temperature", { celsius: 51 }), T0 + 4)
    expect(host.drain().alerts).toMatchObject([{ _tag: "clear", key: "clear:e4" }])
    host.seen(device, T0 + 5, event("e6", "pressure", 0.2), T0 + 5)
    host.seen(device, T0 + 6, event("e7", "pressure", 5), T0 + 6)
    expect(host.drain().alerts).toMatchObject([{ _tag: "raise", rule: { id: "rul_low" }, key: "event:e6" }])
  })

  it("an alert open before activation is cleared when the value is back in range", () => {
    const hot = rule("rul_hot", "threshold", { eventName: "t", max: 80 }, { autoResolve: true })
    const { host } = hostWith([hot])
    const device = host.activate(fresh("d8", { raised: ["rul_hot"] }), T0)
    host.seen(device, T0, { id: "e1", name: "t", data: 20, timestamp: T0 }, T0)
    expect(host.drain().alerts).toMatchObject([{ _tag: "clear", rule: { id: "rul_hot" } }])
  })

  it("an anomaly rule compares a value with the device's recent ones; baselines make the device dirty", () => {
    const odd = rule("rul_odd", "anomaly", { eventName: "power", path: "watts", window: 4, zScore: 3 }, { autoResolve: true })
    const { host } = hostWith([odd])
    const device = host.activate(fresh("d9"), T0)
    let n = 0
    const power = (watts: number) => host.seen(device, T0 + ++n, { id: `p${n}`, name: "power", data: { watts }, timestamp: T0 }, T0 + n)
    for (const watts of [100, 102, 98, 101, 99]) power(watts)
    expect(host.drain().alerts).toEqual([])
    expect(device.dirty).toBe(true)
    power(400)
    expect(host.drain().alerts).toMatchObject([{ _tag: "raise", rule: { id: "rul_odd" }, key: "anomaly:p6" }])
  })

  it("an idle device that is not online leaves memory; an online one stays", () => {
    const { host } = hostWith([])
    const idle = host.activate(fresh("d10"), T0)
    host.seen(idle, T0, undefined, T0)
    stored(host, idle)
    const { host: watched } = hostWith([offlineRule])
    const online = watched.activate(fresh("d11"), T0)
    watched.seen(online, T0, undefined, T0)
    stored(watched, online)
    expect(host.sweep(T0 + 1).map((d) => d.id)).toEqual(["d10"])
    expect(watched.sweep(T0 + 1)).toEqual([])
    expect(host.devices.size).toBe(0)
  })
})

describe("device host: liveness changes as a space counts them (a later one wins there)", () => {
  it("first seen by a late step (its sign of life reached the bucket after its deadline): online as of the sign, then offline", () => {
    // Two processes: the Seen waited out a shard handover, 2 s, and the limit is 1 s.
    const { host } = hostWith([rule("rul_off1", "offline", { afterSeconds: 1 }, { autoResolve: true })])
    const space = spaceOf("d20")
    const late = T0 + 3_000
    const device = host.activate(fresh("d20", { lastSeenAt: T0 }), late)
    host.seen(device, T0, undefined, late)
    expect(space.tell(host, device)).toEqual({ liveness: "online", at: T0 })
    expect(space.live()).toMatchObject({ devicesOnline: 1, devicesOffline: 0 })
    host.wake(late)
    expect(space.tell(host, device)).toEqual({ liveness: "offline", at: T0 + 1_000 })
    expect(space.live()).toMatchObject({ devicesOnline: 0, devicesOffline: 1 })
  })

  it("watched only after it went silent (a rule made later): offline no earlier than the online it follows", () => {
    const { host, setRules } = hostWith([])
    const space = spaceOf("d21")
    const device = host.activate(fresh("d21"), T0)
    host.seen(device, T0, undefined, T0)
    expect(space.tell(host, device)).toBeUndefined() // unwatched: neither
    setRules([rule("rul_off2", "offline", { afterSeconds: 1 }, { autoResolve: true })])
    host.configure(device, T0 + 5_000)
    expect(space.tell(host, device)).toEqual({ liveness: "online", at: T0 + 5_000 })
    host.wake(T0 + 5_000)
    // Its deadline (the last sign + 1 s) is long past: offline at once, dated no earlier than the online.
    expect(space.tell(host, device)).toEqual({ liveness: "offline", at: T0 + 5_000 })
    expect(space.live()).toMatchObject({ devicesOnline: 0, devicesOffline: 1 })
  })
})
