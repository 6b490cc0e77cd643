import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Space } from "../../src/entities/protocol.ts"
import { Sql } from "../../src/store/Sql.ts"
import { startCore, type TestCore } from "../support/core.ts"
import { until } from "../support/eventually.ts"

interface Counts {
  devicesOnline: number
  devicesOffline: number
  openAlerts: number
}

/**
 * Many devices changing at once: the space entity's counts, moved only by the changes it is
 * told, end where the store is (what a reseed would read), and a reseed changes nothing.
 */
describe("a space told many changes at once", () => {
  let t: TestCore
  beforeAll(async () => {
    t = await startCore("pglite")
  })
  afterAll(() => t?.close())

  it("counts what the store holds, each change once", async () => {
    const space = (await t.call("POST", "/spaces", { name: "Told" })).body as { id: string }
    const devices: Array<{ id: string; secretKey: string }> = []
    for (let i = 0; i < 30; i++) devices.push((await t.call("POST", "/devices", { name: `d${i}`, space: { id: space.id } })).body)
    await t.call("POST", "/alertRules", {
      name: "Told silent",
      type: "offline",
      severity: "low",
      autoResolve: true,
      space: { id: space.id },
      // Long enough for 30 events, short enough for the test.
      config: { afterSeconds: 3 }
    })
    const entity = () =>
      t.run(Effect.flatMap(Space.client, (client) => client(space.id).GetSpace())).then(({ devicesOnline, devicesOffline, openAlerts }): Counts => ({
        devicesOnline,
        devicesOffline,
        openAlerts
      }))
    const stored = () =>
      t.run(Sql.use((sql) =>
        sql.query<{ online: unknown; offline: unknown; open: unknown }>(
          `SELECT
             (SELECT count(*) FROM devices d JOIN device_actors da ON da.device_id = d.id WHERE d.space_id = $1 AND da.liveness = 'online') AS online,
             (SELECT count(*) FROM devices d JOIN device_actors da ON da.device_id = d.id WHERE d.space_id = $1 AND da.liveness = 'offline') AS offline,
             (SELECT count(*) FROM alerts al JOIN devices d ON d.id = al.device_id WHERE d.space_id = $1 AND al.resolved_at IS NULL) AS open`,
          [space.id]
        )
      )).then(([row]): Counts => ({ devicesOnline: Number(row.online), devicesOffline: Number(row.offline), openAlerts: Number(row.open) }))
    const reaches = async (expected: Counts, what: string) => {
      await until(async () => JSON.stringify(await entity()) === JSON.stringify(expected), 5_000, what)
      expect(await stored()).toEqual(expected)
      // What a fresh seed reads is what the changes told added up to.
      await t.run(Effect.flatMap(Space.client, (client) => client(space.id).Reseed({ at: Date.now() })))
      expect(await entity()).toEqual(expected)
    }

    await Promise.all(devices.map((d) => t.call("POST", "/events", { name: "ping" }, d.secretKey)))
    await reaches({ devicesOnline: 30, devicesOffline: 0, openAlerts: 0 }, "all online")
    await reaches({ devicesOnline: 0, devicesOffline: 30, openAlerts: 30 }, "all offline with their alerts")
    await Promise.all(devices.map((d) => t.call("POST", "/events", { name: "ping" }, d.secretKey)))
    await reaches({ devicesOnline: 30, devicesOffline: 0, openAlerts: 0 }, "all back, alerts auto-resolved")
  })
})
