import { createActor } from "xstate"
import { describe, expect, it } from "vitest"
import { livenessEvent, type SpaceEvent, type SpaceInput, spaceMachine } from "../../actors/spaceMachine.ts"

const space = (input: SpaceInput = { spaceId: "spc_1", timezone: "Europe/Berlin" }) => createActor(spaceMachine, { input }).start()

const counts = (actor: ReturnType<typeof space>) => {
  const { devicesOnline, devicesOffline, openAlerts } = actor.getSnapshot().context
  return { devicesOnline, devicesOffline, openAlerts }
}

const sendAll = (actor: ReturnType<typeof space>, events: ReadonlyArray<SpaceEvent>) => {
  for (const event of events) actor.send(event)
}

describe("spaceMachine", () => {
  it("starts from its input, zero counts by default", () => {
    const actor = space()
    expect(actor.getSnapshot().context).toEqual({
      spaceId: "spc_1",
      timezone: "Europe/Berlin",
      recipients: [],
      devicesOnline: 0,
      devicesOffline: 0,
      openAlerts: 0
    })
    const counted = createActor(spaceMachine, {
      input: { spaceId: "spc_2", timezone: "UTC", recipients: ["ou_1"], devicesOnline: 3, devicesOffline: 1, openAlerts: 2 }
    }).start()
    expect(counts(counted)).toEqual({ devicesOnline: 3, devicesOffline: 1, openAlerts: 2 })
    expect(counted.getSnapshot().context.recipients).toEqual(["ou_1"])
  })

  it("moves a device between online and offline", () => {
    const actor = space()
    actor.send({ type: "device.online", was: "other" })
    actor.send({ type: "device.online", was: "other" })
    expect(counts(actor)).toMatchObject({ devicesOnline: 2, devicesOffline: 0 })
    actor.send({ type: "device.offline", was: "online" })
    expect(counts(actor)).toMatchObject({ devicesOnline: 1, devicesOffline: 1 })
    actor.send({ type: "device.online", was: "offline" })
    expect(counts(actor)).toMatchObject({ devicesOnline: 2, devicesOffline: 0 })
    actor.send({ type: "device.offline", was: "other" })
    expect(counts(actor)).toMatchObject({ devicesOnline: 2, devicesOffline: 1 })
  })

  it("takes a device out of the counts when it leaves", () => {
    const actor = space({ spaceId: "spc_1", timezone: "UTC", devicesOnline: 2, devicesOffline: 2 })
    actor.send({ type: "device.left", was: "online" })
    actor.send({ type: "device.left", was: "offline", count: 2 })
    expect(counts(actor)).toMatchObject({ devicesOnline: 1, devicesOffline: 0 })
  })

  it("folds identical changes with count", () => {
    const actor = space()
    actor.send({ type: "device.online", was: "other", count: 10 })
    actor.send({ type: "device.offline", was: "online", count: 4 })
    actor.send({ type: "alert.opened", count: 4 })
    actor.send({ type: "alert.resolved", count: 3 })
    expect(counts(actor)).toEqual({ devicesOnline: 6, devicesOffline: 4, openAlerts: 1 })
  })

  it("counts alerts opened and resolved", () => {
    const actor = space()
    sendAll(actor, [{ type: "alert.opened" }, { type: "alert.opened" }, { type: "alert.resolved" }])
    expect(counts(actor).openAlerts).toBe(1)
  })

  it("never lets a count go below zero", () => {
    const actor = space()
    sendAll(actor, [
      { type: "alert.resolved" },
      { type: "device.left", was: "online" },
      { type: "device.left", was: "offline", count: 5 },
      { type: "device.offline", was: "online" },
      { type: "device.online", was: "offline" }
    ])
    expect(counts(actor)).toEqual({ devicesOnline: 1, devicesOffline: 0, openAlerts: 0 })
    actor.send({ type: "alert.opened", count: -3 })
    actor.send({ type: "alert.resolved", count: Number.NaN })
    expect(counts(actor).openAlerts).toBe(0)
  })

  it("replaces its counts on a recount, keeping settings not named", () => {
    const actor = space({ spaceId: "spc_1", timezone: "UTC", recipients: ["ou_1"] })
    sendAll(actor, [{ type: "device.online", was: "other", count: 7 }, { type: "alert.opened", count: 2 }])
    actor.send({ type: "space.recounted", devicesOnline: 3, devicesOffline: 1, openAlerts: 0 })
    expect(counts(actor)).toEqual({ devicesOnline: 3, devicesOffline: 1, openAlerts: 0 })
    expect(actor.getSnapshot().context).toMatchObject({ timezone: "UTC", recipients: ["ou_1"] })
    actor.send({ type: "space.recounted", devicesOnline: -1, devicesOffline: 2, openAlerts: 1, timezone: "Asia/Tokyo", recipients: [] })
    expect(counts(actor)).toEqual({ devicesOnline: 0, devicesOffline: 2, openAlerts: 1 })
    expect(actor.getSnapshot().context).toMatchObject({ timezone: "Asia/Tokyo", recipients: [] })
  })

  it("takes a new timezone and recipients without touching the counts", () => {
    const actor = space()
    actor.send({ type: "device.online", was: "other" })
    actor.send({ type: "space.configured", recipients: ["ou_1", "ou_2"] })
    expect(actor.getSnapshot().context).toMatchObject({ timezone: "Europe/Berlin", recipients: ["ou_1", "ou_2"], devicesOnline: 1 })
    actor.send({ type: "space.configured", timezone: "America/New_York" })
    expect(actor.getSnapshot().context).toMatchObject({ timezone: "America/New_York", recipients: ["ou_1", "ou_2"], devicesOnline: 1 })
  })

  it("names the count event of a device's change of liveness", () => {
    expect(livenessEvent("other", "online")).toEqual({ type: "device.online", was: "other", count: 1 })
    expect(livenessEvent("offline", "online", 3)).toEqual({ type: "device.online", was: "offline", count: 3 })
    expect(livenessEvent("online", "offline")).toEqual({ type: "device.offline", was: "online", count: 1 })
    expect(livenessEvent("other", "offline")).toEqual({ type: "device.offline", was: "other", count: 1 })
    expect(livenessEvent("online", "other")).toEqual({ type: "device.left", was: "online", count: 1 })
    expect(livenessEvent("offline", "other")).toEqual({ type: "device.left", was: "offline", count: 1 })
    expect(livenessEvent("online", "online")).toBeUndefined()
    expect(livenessEvent("other", "other")).toBeUndefined()
  })
})
