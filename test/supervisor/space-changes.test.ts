import { Context, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Sql } from "../../src/store/Sql.ts"
import { spaceCountsSql } from "../../src/store/spaces.ts"
import { type SpaceChange, Supervisor } from "../../src/supervisor/Supervisor.ts"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"

interface Counts {
  devicesOnline: number
  devicesOffline: number
  openAlerts: number
}

/** The space changes the supervisor tells, against what the store counts when it tells them. */
describe("space changes told by the supervisor", () => {
  let t: TestApp
  const call = (method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => t.call(method, path, { key, body })
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  it("are in the store when told, and add up to the store's counts", async () => {
    const space = (await call("POST", "/spaces", { name: "Told" })).body
    const devices: Array<{ id: string; secretKey: string }> = []
    for (let i = 0; i < 30; i++) devices.push((await call("POST", "/devices", { name: `d${i}`, space: { id: space.id } })).body)
    await call("POST", "/alertRules", {
      name: "Told silent",
      type: "offline",
      severity: "low",
      autoResolve: true,
      space: { id: space.id },
      // Long enough for 30 events and a settle, short enough for the test.
      config: { afterSeconds: 2 }
    })

    const sql = Context.get(t.context, Sql)
    const storeCounts = () =>
      sql.query(spaceCountsSql, [[space.id]]).pipe(
        Effect.map(([row]): Counts => ({
          devicesOnline: Number(row.devices_online),
          devicesOffline: Number(row.devices_offline),
          openAlerts: Number(row.open_alerts)
        })),
        Effect.orDie
      )
    const told: Counts = { devicesOnline: 0, devicesOffline: 0, openAlerts: 0 }
    const seen: Array<{ readonly told: Counts; readonly stored: Counts }> = []
    const tell = (change: SpaceChange) => {
      const n = change.event.count ?? 1
      switch (change.event.type) {
        case "device.online":
          told.devicesOnline += n
          if (change.event.was === "offline") told.devicesOffline -= n
          break
        case "device.offline":
          told.devicesOffline += n
          if (change.event.was === "online") told.devicesOnline -= n
          break
        case "device.left":
          if (change.event.was === "online") told.devicesOnline -= n
          else told.devicesOffline -= n
          break
        case "alert.opened":
          told.openAlerts += n
          break
        case "alert.resolved":
          told.openAlerts -= n
          break
      }
    }
    Context.get(t.context, Supervisor).onSpaceChanges((_at, changes) =>
      Effect.gen(function*() {
        for (const change of changes) if (change.spaceId === space.id) tell(change)
        seen.push({ told: { ...told }, stored: yield* storeCounts() })
      })
    )
    const settle = () => Context.get(t.context, Supervisor).settled()
    const until = async (check: () => Promise<boolean>, what: string) => {
      const deadline = Date.now() + 5_000
      while (!(await check())) {
        if (Date.now() > deadline) throw new Error(`${what} not seen within 5 s`)
        await new Promise((r) => setTimeout(r, 20))
      }
    }
    const same = async (expected: Counts) => {
      await settle()
      expect(told).toEqual(expected)
      expect(await Effect.runPromise(storeCounts())).toEqual(expected)
    }

    // All seen: online, told as they are stored (the store is never behind what was told).
    await Promise.all(devices.map((d) => call("POST", "/events", { name: "ping" }, d.secretKey)))
    await same({ devicesOnline: 30, devicesOffline: 0, openAlerts: 0 })
    for (const s of seen) expect(s.stored.devicesOnline).toBeGreaterThanOrEqual(s.told.devicesOnline)

    // All silent: offline with their alerts.
    seen.length = 0
    await until(async () => told.devicesOffline === 30 && told.openAlerts === 30, "all offline")
    await same({ devicesOnline: 0, devicesOffline: 30, openAlerts: 30 })
    for (const s of seen) {
      expect(s.stored.devicesOffline).toBeGreaterThanOrEqual(s.told.devicesOffline)
      expect(s.stored.openAlerts).toBeGreaterThanOrEqual(s.told.openAlerts)
    }

    // Back: online, alerts auto-resolved.
    await Promise.all(devices.map((d) => call("POST", "/events", { name: "ping" }, d.secretKey)))
    await same({ devicesOnline: 30, devicesOffline: 0, openAlerts: 0 })
  })
})
