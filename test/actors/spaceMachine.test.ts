import { createActor } from "xstate"
import { describe, expect, it } from "vitest"
import { CLOSED_KEPT, liveOf, type SpaceEvent, type SpaceInput, spaceMachine } from "../../actors/spaceMachine.ts"

const space = (input: Partial<SpaceInput> = {}) =>
  createActor(spaceMachine, { input: { spaceId: "spc_1", timezone: "Europe/Berlin", ...input } }).start()

const counts = (actor: ReturnType<typeof space>) => liveOf(actor.getSnapshot().context)
const live = (devicesOnline: number, devicesOffline: number, openAlerts: number) => ({ devicesOnline, devicesOffline, openAlerts })

const sendAll = (actor: ReturnType<typeof space>, events: ReadonlyArray<SpaceEvent>) => {
  for (const event of events) actor.send(event)
}

/** The counts derived from the sets, against which the kept counts are checked. */
const derived = (actor: ReturnType<typeof space>) => {
  const { devices, alerts } = actor.getSnapshot().context
  const all = [...devices.values()]
  return live(all.filter((d) => d.liveness === "online").length, all.filter((d) => d.liveness === "offline").length, alerts.size)
}

const members = [
  { deviceId: "d1", liveness: "other" as const, at: 0 },
  { deviceId: "d2", liveness: "online" as const, at: 10 },
  { deviceId: "d3", liveness: "offline" as const, at: 10 }
]

describe("spaceMachine", () => {
  it("starts from its seed: members by liveness, open alerts of members only", () => {
    const actor = space({
      recipients: ["ou_1"],
      devices: members,
      alerts: [{ alertId: "a1", deviceId: "d3" }, { alertId: "a2", deviceId: "elsewhere" }]
    })
    expect(counts(actor)).toEqual(live(1, 1, 1))
    expect(actor.getSnapshot().context).toMatchObject({ spaceId: "spc_1", timezone: "Europe/Berlin", recipients: ["ou_1"] })
    expect(counts(space())).toEqual(live(0, 0, 0))
  })

  it("moves a member between online and offline, a later change winning", () => {
    const actor = space({ devices: members })
    actor.send({ type: "device.liveness", deviceId: "d1", liveness: "online", at: 20 })
    expect(counts(actor)).toEqual(live(2, 1, 0))
    actor.send({ type: "device.liveness", deviceId: "d2", liveness: "offline", at: 30 })
    expect(counts(actor)).toEqual(live(1, 2, 0))
    // Older than what the space holds for d2: ignored.
    actor.send({ type: "device.liveness", deviceId: "d2", liveness: "online", at: 25 })
    expect(counts(actor)).toEqual(live(1, 2, 0))
    actor.send({ type: "device.liveness", deviceId: "d3", liveness: "other", at: 30 })
    expect(counts(actor)).toEqual(live(1, 1, 0))
    expect(counts(actor)).toEqual(derived(actor))
  })

  it("counts a change delivered twice once", () => {
    const actor = space({ devices: members })
    const events: Array<SpaceEvent> = [
      { type: "device.liveness", deviceId: "d1", liveness: "online", at: 20 },
      { type: "alert.opened", alertId: "a1", deviceId: "d1" },
      { type: "device.liveness", deviceId: "d1", liveness: "offline", at: 40 },
      { type: "alert.opened", alertId: "a2", deviceId: "d1" }
    ]
    sendAll(actor, events)
    sendAll(actor, events)
    expect(counts(actor)).toEqual(live(1, 2, 2))
    actor.send({ type: "alert.closed", alertId: "a1" })
    actor.send({ type: "alert.closed", alertId: "a1" })
    expect(counts(actor)).toEqual(live(1, 2, 1))
    expect(counts(actor)).toEqual(derived(actor))
  })

  it("ignores changes about devices that are not members until they join", () => {
    const actor = space({ devices: members })
    actor.send({ type: "device.liveness", deviceId: "d9", liveness: "online", at: 50 })
    actor.send({ type: "alert.opened", alertId: "a9", deviceId: "d9" })
    expect(counts(actor)).toEqual(live(1, 1, 0))
    actor.send({ type: "device.joined", deviceId: "d9", liveness: "online", at: 50 })
    actor.send({ type: "alert.opened", alertId: "a9", deviceId: "d9" })
    expect(counts(actor)).toEqual(live(2, 1, 1))
    // Joining again with an older liveness changes nothing.
    actor.send({ type: "device.joined", deviceId: "d9", liveness: "offline", at: 40 })
    expect(counts(actor)).toEqual(live(2, 1, 1))
  })

  it("never reopens a closed alert, even when the open arrives late", () => {
    const actor = space({ devices: members })
    actor.send({ type: "alert.closed", alertId: "a1" })
    actor.send({ type: "alert.opened", alertId: "a1", deviceId: "d1" })
    expect(counts(actor).openAlerts).toBe(0)
    // A reseed that still lists it (it cannot, the close is written first) does not reopen it either.
    actor.send({ type: "space.seeded", timezone: "UTC", recipients: [], devices: members, alerts: [{ alertId: "a1", deviceId: "d1" }] })
    expect(counts(actor).openAlerts).toBe(0)
  })

  it("remembers a bounded number of closed alerts", () => {
    const actor = space({ devices: members })
    for (let i = 0; i <= CLOSED_KEPT; i++) actor.send({ type: "alert.closed", alertId: `a${i}` })
    const { closed } = actor.getSnapshot().context
    expect(closed.size).toBe(CLOSED_KEPT)
    expect(closed.has("a0")).toBe(false)
    expect(closed.has(`a${CLOSED_KEPT}`)).toBe(true)
  })

  it("replaces members, alerts and settings on a reseed, keeping a newer liveness it holds", () => {
    const actor = space({ devices: members, alerts: [{ alertId: "a1", deviceId: "d3" }] })
    actor.send({ type: "device.liveness", deviceId: "d2", liveness: "offline", at: 100 })
    actor.send({
      type: "space.seeded",
      timezone: "Asia/Tokyo",
      recipients: ["ou_2", "ou_1"],
      // d3 moved away; d2's seed is older than what the space holds; d4 is new.
      devices: [{ deviceId: "d1", liveness: "other", at: 0 }, { deviceId: "d2", liveness: "online", at: 50 }, {
        deviceId: "d4",
        liveness: "online",
        at: 60
      }],
      alerts: [{ alertId: "a4", deviceId: "d4" }]
    })
    expect(counts(actor)).toEqual(live(1, 1, 1))
    expect(counts(actor)).toEqual(derived(actor))
    expect(actor.getSnapshot().context).toMatchObject({ timezone: "Asia/Tokyo", recipients: ["ou_2", "ou_1"] })
    // d3 is no member any more: its changes are ignored.
    actor.send({ type: "device.liveness", deviceId: "d3", liveness: "online", at: 200 })
    expect(counts(actor)).toEqual(live(1, 1, 1))
  })

  it("applies many changes in one event as it applies them one by one", () => {
    const ids = ["d1", "d2", "d3", "d4"]
    const seeded = { devices: ids.slice(0, 3).map((deviceId) => ({ deviceId, liveness: "other" as const, at: 0 })) }
    const one = space(seeded)
    const batched = space(seeded)
    let seed = 11
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    for (let round = 0; round < 20; round++) {
      const devices = Array.from({ length: 8 }, () => ({
        deviceId: ids[random(ids.length)],
        liveness: (["online", "offline", "other"] as const)[random(3)],
        at: random(1000)
      }))
      const alerts = Array.from({ length: 8 }, () => ({ alertId: `a${random(12)}`, deviceId: ids[random(ids.length)], open: random(3) > 0 }))
      sendAll(one, [
        ...devices.map((d): SpaceEvent => ({ type: "device.liveness", ...d })),
        ...alerts.map((a): SpaceEvent => (a.open ? { type: "alert.opened", alertId: a.alertId, deviceId: a.deviceId } : { type: "alert.closed", alertId: a.alertId }))
      ])
      batched.send({ type: "changes", devices, alerts })
      const a = one.getSnapshot().context
      const b = batched.getSnapshot().context
      expect(liveOf(b)).toEqual(liveOf(a))
      expect([...b.devices]).toEqual([...a.devices])
      expect([...b.alerts]).toEqual([...a.alerts])
      expect([...b.closed]).toEqual([...a.closed])
    }
    // d4 never joined: nothing about it counts.
    expect(batched.getSnapshot().context.devices.has("d4")).toBe(false)
    expect(counts(batched)).toEqual(derived(batched))
  })

  it("keeps its counts equal to its sets through a random history told out of order and twice", () => {
    const ids = ["d1", "d2", "d3", "d4", "d5"]
    const actor = space({ devices: ids.map((deviceId) => ({ deviceId, liveness: "other" as const, at: 0 })) })
    let seed = 7
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const events: Array<SpaceEvent> = []
    for (let i = 0; i < 500; i++) {
      const deviceId = ids[random(ids.length)]
      const pick = random(4)
      if (pick === 0) events.push({ type: "device.liveness", deviceId, liveness: (["online", "offline", "other"] as const)[random(3)], at: random(1000) })
      else if (pick === 1) events.push({ type: "alert.opened", alertId: `a${random(50)}`, deviceId })
      else if (pick === 2) events.push({ type: "alert.closed", alertId: `a${random(50)}` })
      else events.push(events[random(events.length || 1)] ?? { type: "alert.closed", alertId: "none" })
    }
    sendAll(actor, events)
    expect(counts(actor)).toEqual(derived(actor))
    // Each device holds the liveness of its latest `at`, whatever the order of arrival.
    for (const id of ids) {
      const told = events.filter((e): e is Extract<SpaceEvent, { type: "device.liveness" }> => e.type === "device.liveness" && e.deviceId === id)
      const latest = Math.max(0, ...told.map((e) => e.at))
      expect(actor.getSnapshot().context.devices.get(id)?.at).toBe(latest)
    }
  })
})
