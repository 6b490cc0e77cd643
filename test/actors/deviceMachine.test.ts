import { createActor, SimulatedClock } from "xstate"
import { describe, expect, it } from "vitest"
import { type DeviceEmitted, deviceMachine } from "../../actors/deviceMachine.ts"

const start = (offlineAfterMs: number | null, clock = new SimulatedClock(), snapshot?: ReturnType<ReturnType<typeof createActor<typeof deviceMachine>>["getPersistedSnapshot"]>) => {
  const actor = createActor(deviceMachine, { input: { deviceId: "dev_1", offlineAfterMs }, clock, ...(snapshot ? { snapshot } : {}) })
  const emitted: Array<DeviceEmitted> = []
  actor.on("*", (e) => emitted.push(e))
  actor.start()
  return { actor, clock, emitted }
}

describe("deviceMachine", () => {
  it("goes offline when the deadline passes without a sign of life, and not a moment before", () => {
    const { actor, clock, emitted } = start(60_000)
    clock.set(1_000)
    actor.send({ type: "device.seen", at: 1_000 })
    expect(actor.getSnapshot().value).toBe("online")
    clock.increment(59_999)
    expect(actor.getSnapshot().value).toBe("online")
    clock.increment(1)
    expect(actor.getSnapshot().value).toBe("offline")
    expect(emitted).toEqual([{ type: "device.offline", deviceId: "dev_1", lastSeenAt: 1_000, at: 61_000, afterMs: 60_000 }])
  })

  it("restarts the deadline on every sign of life", () => {
    const { actor, clock, emitted } = start(10_000)
    actor.send({ type: "device.seen", at: 0 })
    clock.increment(9_000)
    actor.send({ type: "device.seen", at: 9_000 })
    clock.increment(9_000)
    expect(actor.getSnapshot().value).toBe("online")
    clock.increment(1_000)
    expect(actor.getSnapshot().value).toBe("offline")
    expect(emitted.map((e) => e.type)).toEqual(["device.offline"])
  })

  it("counts a sign of life told late from when it happened, not from when it was told", () => {
    const { actor, clock, emitted } = start(10_000)
    actor.send({ type: "device.seen", at: 0 })
    clock.increment(9_000)
    // Seen at 6,000, told at 9,000: the deadline is 16,000, 7,000 from now.
    actor.send({ type: "device.seen", at: 6_000, toldAt: 9_000 })
    clock.increment(6_999)
    expect(actor.getSnapshot().value).toBe("online")
    clock.increment(1)
    expect(actor.getSnapshot().value).toBe("offline")
    expect(emitted).toEqual([{ type: "device.offline", deviceId: "dev_1", lastSeenAt: 6_000, at: 16_000, afterMs: 10_000 }])
  })

  it("comes back online when seen again and says so", () => {
    const { actor, clock, emitted } = start(5_000)
    actor.send({ type: "device.seen", at: 0 })
    clock.increment(5_000)
    actor.send({ type: "device.seen", at: 7_000 })
    expect(actor.getSnapshot().value).toBe("online")
    expect(emitted.map((e) => e.type)).toEqual(["device.offline", "device.online"])
    expect(emitted[1]).toEqual({ type: "device.online", deviceId: "dev_1", at: 7_000 })
  })

  it("is not watched without an offline rule, and starts being watched when one is configured", () => {
    const { actor, clock, emitted } = start(null)
    actor.send({ type: "device.seen", at: 0 })
    clock.increment(1_000_000)
    expect(actor.getSnapshot().value).toBe("unwatched")
    actor.send({ type: "device.configured", offlineAfterMs: 1_000, at: 1_000_000 })
    expect(actor.getSnapshot().value).toBe("online")
    clock.increment(1)
    // The rule came late: the device has been silent for longer than its deadline already.
    expect(actor.getSnapshot().value).toBe("offline")
    expect(emitted.map((e) => e.type)).toEqual(["device.offline"])
  })

  it("resumes a persisted timer for what is left of it, without repeating what it emitted", () => {
    const first = start(30_000)
    first.actor.send({ type: "device.seen", at: 100_000 })
    first.clock.increment(10_000)
    const persisted = first.actor.getPersistedSnapshot()
    first.actor.stop()

    // The process was down; 15 s later the actor is rehydrated from its snapshot.
    const clock = new SimulatedClock()
    const second = start(30_000, clock, persisted)
    expect(second.emitted).toEqual([])
    second.actor.send({ type: "device.resumed", at: 125_000 })
    clock.increment(4_999)
    expect(second.actor.getSnapshot().value).toBe("online")
    clock.increment(1)
    expect(second.actor.getSnapshot().value).toBe("offline")
    expect(second.emitted).toEqual([{ type: "device.offline", deviceId: "dev_1", lastSeenAt: 100_000, at: 130_000, afterMs: 30_000 }])
  })

  it("goes offline at once when resumed after its deadline passed during the outage", () => {
    const first = start(30_000)
    first.actor.send({ type: "device.seen", at: 0 })
    const persisted = first.actor.getPersistedSnapshot()
    first.actor.stop()
    const second = start(30_000, new SimulatedClock(), persisted)
    second.actor.send({ type: "device.resumed", at: 90_000 })
    second.clock.increment(0)
    expect(second.actor.getSnapshot().value).toBe("offline")
  })

  it("rehydrates an offline device without announcing it again", () => {
    const first = start(1_000)
    first.actor.send({ type: "device.seen", at: 0 })
    first.clock.increment(1_000)
    expect(first.emitted).toHaveLength(1)
    const second = start(1_000, new SimulatedClock(), first.actor.getPersistedSnapshot())
    second.clock.increment(10_000)
    expect(second.actor.getSnapshot().value).toBe("offline")
    expect(second.emitted).toEqual([])
  })
})

describe("deviceMachine anomaly baselines", () => {
  const rule = { id: "rul_a", eventName: "power", window: 5, zScore: 3 }
  it("judges a value against the previous window once it is full, and keeps the baseline in its snapshot", () => {
    const { actor, emitted } = start(null)
    for (const [i, value] of [10, 11, 9, 10, 10].entries()) {
      actor.send({ type: "device.measured", at: i, eventName: "power", data: value, rules: [rule] })
    }
    expect(emitted).toEqual([])
    actor.send({ type: "device.measured", at: 5, eventName: "power", data: 10.5, rules: [rule] })
    expect(emitted.at(-1)).toMatchObject({ type: "device.anomaly", ruleId: "rul_a", verdict: "clear" })
    actor.send({ type: "device.measured", at: 6, eventName: "power", data: 50, rules: [rule] })
    expect(emitted.at(-1)).toMatchObject({ type: "device.anomaly", ruleId: "rul_a", verdict: "breach" })
    expect(actor.getPersistedSnapshot()).toMatchObject({ context: { baselines: { rul_a: [9, 10, 10, 10.5, 50] } } })
    actor.send({ type: "device.measured", at: 7, eventName: "other", data: 1, rules: [rule] })
    expect(emitted).toHaveLength(2)
  })
})
