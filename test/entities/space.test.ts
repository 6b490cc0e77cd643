import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Liveness } from "../../actors/spaceMachine.ts"
import { Space } from "../../src/entities/protocol.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"
import { startCore, type TestCore } from "../support/core.ts"
import { STORE_KINDS } from "../support/databases.ts"

const live = (devicesOnline: number, devicesOffline: number, openAlerts: number) => ({ devicesOnline, devicesOffline, openAlerts })

/** The Space entity through the real cluster (a single runner on PGlite, an HTTP runner on Postgres). */
describe.each(STORE_KINDS)("the Space entity on %s", (kind) => {
  let t: TestCore
  beforeAll(async () => {
    t = await startCore(kind)
  })
  afterAll(() => t?.close())

  const query = <T>(text: string, params: ReadonlyArray<unknown> = []) => t.run(Sql.use((sql) => sql.query<T>(text, params)))
  const space = (id: string) => t.run(Effect.flatMap(Space.client, (client) => client(id).GetSpace()))
  const counts = async (id: string) => {
    const { devicesOnline, devicesOffline, openAlerts } = await space(id)
    return live(devicesOnline, devicesOffline, openAlerts)
  }
  const tellLiveness = (spaceId: string, deviceId: string, liveness: Liveness, at: number) =>
    t.run(Effect.flatMap(Space.client, (client) => client(spaceId).Changes({ devices: [{ deviceId, liveness, at }], alerts: [] })))
  const tellAlert = (spaceId: string, alertId: string, deviceId: string, open: boolean) =>
    t.run(Effect.flatMap(Space.client, (client) => client(spaceId).Changes({ devices: [], alerts: [{ alertId, deviceId, open }] })))
  const reseed = (spaceId: string) => t.run(Effect.flatMap(Space.client, (client) => client(spaceId).Reseed({ at: Date.now() })))
  /** What a device entity writes before it tells its space. */
  const storeLiveness = (deviceId: string, liveness: Liveness, at: number) =>
    query(
      `INSERT INTO device_actors (device_id, snapshot, updated_at, liveness, liveness_at) VALUES ($1, '{}'::jsonb, $3, $2, $3)
       ON CONFLICT (device_id) DO UPDATE SET liveness = $2, liveness_at = $3`,
      [deviceId, liveness, at]
    )
  const newSpace = async (name: string, timezone = "UTC") => (await t.call("POST", "/spaces", { name, timezone })).body as { id: string }
  const newDevice = async (spaceId: string) => (await t.call("POST", "/devices", { name: "d", space: { id: spaceId } })).body as { id: string }
  const newRule = async () =>
    (await t.call("POST", "/alertRules", { name: "r", type: "threshold", severity: "low", config: { eventName: "t", max: 1 } })).body as { id: string }
  const insertAlert = async (ruleId: string, deviceId: string, resolved = false) => {
    const id = `alt_${Math.random().toString(36).slice(2)}`
    const [{ organisation_id }] = await query<{ organisation_id: string }>("SELECT organisation_id FROM devices WHERE id = $1", [deviceId])
    await query(
      `INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, state, first_seen_at, last_seen_at, resolved_at, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 1, 1, $6, 1, 1)`,
      [id, organisation_id, ruleId, deviceId, resolved ? "resolved" : "unresolved", resolved ? 2 : null]
    )
    return id
  }

  it("counts what the store holds when it is seeded: stored liveness, open alerts of its devices", async () => {
    const s = await newSpace("Seeded")
    const [a, b, c] = [await newDevice(s.id), await newDevice(s.id), await newDevice(s.id)]
    const elsewhere = await newDevice((await newSpace("Other")).id)
    await storeLiveness(a.id, "online", 10)
    await storeLiveness(b.id, "offline", 10)
    await storeLiveness(elsewhere.id, "online", 10)
    const rule = await newRule()
    await insertAlert(rule.id, b.id)
    await insertAlert(rule.id, c.id, true)
    await insertAlert(rule.id, elsewhere.id)
    // Written behind the entity's back (it was seeded when REST created the devices): not counted...
    expect(await counts(s.id)).toEqual(live(0, 0, 0))
    // ...until it is seeded again.
    await reseed(s.id)
    expect(await counts(s.id)).toEqual(live(1, 1, 1))
    expect((await space(s.id)).timezone).toBe("UTC")
  })

  it("follows device liveness, a later change winning, and counts a change told twice once", async () => {
    const s = await newSpace("Liveness")
    const a = await newDevice(s.id)
    const b = await newDevice(s.id)
    expect(await counts(s.id)).toEqual(live(0, 0, 0))
    await storeLiveness(a.id, "online", 100)
    await tellLiveness(s.id, a.id, "online", 100)
    await tellLiveness(s.id, a.id, "online", 100)
    await storeLiveness(b.id, "online", 100)
    await tellLiveness(s.id, b.id, "online", 100)
    expect(await counts(s.id)).toEqual(live(2, 0, 0))
    await tellLiveness(s.id, a.id, "offline", 200)
    // The same change again under another message id (a handler run again after a crash).
    await tellLiveness(s.id, a.id, "offline", 200)
    expect(await counts(s.id)).toEqual(live(1, 1, 0))
    // Late: older than what the space holds for the device.
    await tellLiveness(s.id, a.id, "online", 150)
    expect(await counts(s.id)).toEqual(live(1, 1, 0))
    await tellLiveness(s.id, b.id, "other", 300)
    expect(await counts(s.id)).toEqual(live(0, 1, 0))
  })

  it("counts alerts opened and closed once, and never reopens a closed one", async () => {
    const s = await newSpace("Alerts")
    const d = await newDevice(s.id)
    await tellAlert(s.id, "alt_1", d.id, true)
    await tellAlert(s.id, "alt_1", d.id, true)
    await tellAlert(s.id, "alt_2", d.id, true)
    expect(await counts(s.id)).toEqual(live(0, 0, 2))
    await tellAlert(s.id, "alt_1", d.id, false)
    await tellAlert(s.id, "alt_1", d.id, false)
    expect(await counts(s.id)).toEqual(live(0, 0, 1))
    await tellAlert(s.id, "alt_1", d.id, true)
    expect(await counts(s.id)).toEqual(live(0, 0, 1))
    // An alert of a device that is not in the space.
    const other = await newDevice((await newSpace("Other")).id)
    await tellAlert(s.id, "alt_3", other.id, true)
    expect(await counts(s.id)).toEqual(live(0, 0, 1))
  })

  it("lets a device created after its seed join, and drops late news of a device that moved away", async () => {
    const s = await newSpace("Joining")
    const to = await newSpace("Elsewhere")
    expect(await counts(s.id)).toEqual(live(0, 0, 0))
    // Created behind the entity's back (no reseed): its first liveness makes it a member.
    const [{ id: orgId }] = await query<{ id: string }>("SELECT id FROM organisations LIMIT 1")
    const deviceId = `dev_join_${kind}`
    await query(
      "INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, created_at, updated_at) VALUES ($1, $2, $3, 'x', 'j', 1, 1)",
      [deviceId, orgId, s.id]
    )
    await storeLiveness(deviceId, "online", 500)
    await tellLiveness(s.id, deviceId, "online", 500)
    expect(await counts(s.id)).toEqual(live(1, 0, 0))
    // Moved over REST: both spaces reseed.
    await t.call("PUT", `/devices/${deviceId}`, { space: { id: to.id } })
    expect(await counts(s.id)).toEqual(live(0, 0, 0))
    expect(await counts(to.id)).toEqual(live(1, 0, 0))
    // News about it still addressed to the space it left: dropped there.
    await tellLiveness(s.id, deviceId, "offline", 600)
    expect(await counts(s.id)).toEqual(live(0, 0, 0))
  })

  it("applies a batch of liveness and alert changes in one message, members joining from the store", async () => {
    const s = await newSpace("Batch")
    const elsewhere = await newDevice((await newSpace("Not here")).id)
    const [{ id: orgId }] = await query<{ id: string }>("SELECT id FROM organisations LIMIT 1")
    const ids = [`dev_b1_${kind}`, `dev_b2_${kind}`]
    for (const id of ids) {
      await query(
        "INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, created_at, updated_at) VALUES ($1, $2, $3, $1, 'b', 1, 1)",
        [id, orgId, s.id]
      )
    }
    const change = () =>
      t.run(Effect.flatMap(Space.client, (client) =>
        client(s.id).Changes({
          devices: [
            { deviceId: ids[0], liveness: "online", at: 10 },
            { deviceId: ids[1], liveness: "offline", at: 10 },
            { deviceId: elsewhere.id, liveness: "online", at: 10 }
          ],
          alerts: [
            { alertId: "alt_b1", deviceId: ids[1], open: true },
            { alertId: "alt_b2", deviceId: elsewhere.id, open: true },
            { alertId: "alt_b3", deviceId: ids[0], open: true },
            { alertId: "alt_b3", deviceId: ids[0], open: false }
          ]
        })))
    await change()
    await change()
    expect(await counts(s.id)).toEqual(live(1, 1, 1))
  })

  it("holds its timezone and alert recipients, reseeded after REST writes them", async () => {
    const token = (await t.call("POST", "/auth/token", { username: ADMIN_EMAIL, password: ADMIN_PASSWORD }, null, { "x-app-key": BOOTSTRAP_KEY }))
      .body.accessToken as string
    const s = await newSpace("Zoned", "Europe/Dublin")
    expect(await space(s.id)).toMatchObject({ timezone: "Europe/Dublin", recipients: [] })
    await t.call("PUT", `/spaces/${s.id}`, { timezone: "Asia/Tokyo" })
    expect((await space(s.id)).timezone).toBe("Asia/Tokyo")
    const one = (await t.call("POST", "/organisations/users/", { emailAddress: `one-${kind}@example.com`, fullName: "One" }, token)).body
    const two = (await t.call("POST", "/organisations/users/", { emailAddress: `two-${kind}@example.com`, fullName: "Two" }, token)).body
    await t.call("POST", `/spaces/${s.id}/alerts/users/${two.id}`, undefined, token)
    const added = (await t.call("POST", `/spaces/${s.id}/alerts/users/${one.id}`, undefined, token)).body
    expect(added.alertUsers.map((u: { id: string }) => u.id)).toEqual([two.id, one.id])
    expect((await space(s.id)).recipients).toEqual([two.id, one.id])
    await t.call("DELETE", `/spaces/${s.id}/alerts/users/${two.id}`, undefined, token)
    expect((await space(s.id)).recipients).toEqual([one.id])
    // Removing the user from the organisation takes its subscription along.
    await t.call("DELETE", `/organisations/users/${one.id}`, undefined, token)
    expect((await space(s.id)).recipients).toEqual([])
    await reseed(s.id)
    expect((await space(s.id)).recipients).toEqual([])
  })
})
