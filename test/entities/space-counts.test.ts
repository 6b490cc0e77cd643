import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Space } from "../../src/entities/protocol.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { startCore, type TestCore } from "../support/core.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

interface Live {
  readonly devicesOnline: number
  readonly devicesOffline: number
  readonly openAlerts: number
}

/** Polls `probe` every 10 ms until it returns a value; fails after `ms`. Answers the value and how long it took. */
const within = async <A>(ms: number, what: string, probe: () => Promise<A | undefined>): Promise<{ value: A; after: number }> => {
  const started = Date.now()
  for (;;) {
    const value = await probe()
    if (value !== undefined) return { value, after: Date.now() - started }
    if (Date.now() - started > ms) throw new Error(`${what} not seen within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

/** REST of a test app or a test core. */
interface Caller {
  call(method: string, path: string, options?: { key?: string; body?: unknown }): Promise<{ body: any }>
}
const caller = (t: TestCore): Caller => ({ call: (method, path, options = {}) => t.call(method, path, options.body, options.key) })

const liveOf = (t: Caller, spaceId: string) =>
  t.call("GET", `/spaces/${spaceId}`, { key: BOOTSTRAP_KEY }).then((r) => r.body.live as Live)

/** Waits until the space's counts are `expected` (bounded; how fast is bench:cluster's and bench:actors' matter, not a timed test's). */
const countsBecome = async (t: Caller, spaceId: string, expected: Live, what: string) => {
  const seen = await within(10_000, what, async () => {
    const live = await liveOf(t, spaceId)
    return live.devicesOnline === expected.devicesOnline && live.devicesOffline === expected.devicesOffline &&
        live.openAlerts === expected.openAlerts
      ? live
      : undefined
  })
  expect(seen.value).toEqual(expected)
  return seen.after
}

/** What the store counts for the space (the liveness device actors wrote, open alerts): the entity must agree once things are quiet. */
const storeCounts = (t: TestApp, spaceId: string) =>
  Effect.runPromise(
    Effect.provideContext(
      Sql.use((sql) =>
        sql.query<{ devices_online: unknown; devices_offline: unknown; open_alerts: unknown }>(
          `SELECT
             (SELECT count(*) FROM devices d JOIN device_actors da ON da.device_id = d.id WHERE d.space_id = $1 AND da.liveness = 'online') AS devices_online,
             (SELECT count(*) FROM devices d JOIN device_actors da ON da.device_id = d.id WHERE d.space_id = $1 AND da.liveness = 'offline') AS devices_offline,
             (SELECT count(*) FROM alerts al JOIN devices d ON d.id = al.device_id WHERE d.space_id = $1 AND al.resolved_at IS NULL) AS open_alerts`,
          [spaceId]
        )
      ),
      t.context
    )
  ).then(([row]) => ({
    devicesOnline: Number(row.devices_online),
    devicesOffline: Number(row.devices_offline),
    openAlerts: Number(row.open_alerts)
  }))

/** What the space's entity holds, asked through the cluster from this process. */
const entityOf = (t: TestApp, spaceId: string) =>
  Effect.runPromise(Effect.provideContext(Effect.flatMap(Space.client, (client) => client(spaceId).GetSpace()), t.context))

const live = (devicesOnline: number, devicesOffline: number, openAlerts: number): Live => ({ devicesOnline, devicesOffline, openAlerts })

describe.each(STORE_KINDS)("space counts from space entities on %s", (kind) => {
  let t: TestApp
  const call = (method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => t.call(method, path, { key, body })
  beforeAll(async () => {
    t = await startAppOn(kind)
  })
  afterAll(() => t.close())

  it("follow a device online, offline and back, and alerts opened, auto-resolved and resolved over REST", async () => {
    const space = (await call("POST", "/spaces", { name: "Counted" })).body
    expect(space.live).toEqual(live(0, 0, 0))
    const device = (await call("POST", "/devices", { name: "meter", space: { id: space.id } })).body
    const offline = (await call("POST", "/alertRules", {
      name: "Silent",
      type: "offline",
      severity: "high",
      autoResolve: true,
      space: { id: space.id },
      config: { afterSeconds: 1 }
    })).body
    const hot = (await call("POST", "/alertRules", {
      name: "Hot",
      type: "threshold",
      severity: "low",
      space: { id: space.id },
      config: { eventName: "t", max: 10 }
    })).body
    expect((await call("GET", `/spaces/${space.id}`)).body.live).toEqual(live(0, 0, 0))

    // Seen: online.
    await call("POST", "/events", { name: "ping" }, device.secretKey)
    await countsBecome(t, space.id, live(1, 0, 0), "the device online")

    // Silent for a second: offline, with its offline alert.
    const silentFrom = Date.now()
    await within(10_000, "the offline alert", async () => {
      const open = (await call("GET", `/alerts?unresolved=true&alertRule.id=${offline.id}`)).body
      return open.length === 1 ? open : undefined
    })
    const offlineAfter = await countsBecome(t, space.id, live(0, 1, 1), "the device offline with its alert")
    expect(Date.now() - silentFrom).toBeLessThan(10_000)

    // Back: online, the alert auto-resolved.
    await call("POST", "/events", { name: "t", data: 5 }, device.secretKey)
    await countsBecome(t, space.id, live(1, 0, 0), "the device back online")

    // Out of range: a threshold alert opens; resolved over REST, the count drops at once.
    await call("POST", "/events", { name: "t", data: 50 }, device.secretKey)
    await countsBecome(t, space.id, live(1, 0, 1), "the threshold alert")
    const [alert] = (await call("GET", `/alerts?unresolved=true&alertRule.id=${hot.id}`)).body
    const resolved = await call("PUT", `/alerts/${alert.id}/resolve`, {})
    expect(resolved.body.state).toBe("resolved")
    expect((await call("GET", `/spaces/${space.id}`)).body.live).toEqual(live(1, 0, 0))
    // Resolving again changes nothing.
    await call("PUT", `/alerts/${alert.id}/resolve`, {})
    expect((await call("GET", `/spaces/${space.id}`)).body.live).toEqual(live(1, 0, 0))

    // The list answers the same counts, and so does the store.
    const listed = (await call("GET", "/spaces?limit=100")).body.spaces.find((s: { id: string }) => s.id === space.id)
    expect(listed.live).toEqual(live(1, 0, 0))
    expect(await storeCounts(t, space.id)).toEqual(live(1, 0, 0))

    await call("PUT", `/alertRules/${offline.id}`, { enabled: false })
    await call("PUT", `/alertRules/${hot.id}`, { enabled: false })
  })

  it("move a device's liveness and open alerts with it to another space, and drop them when it is deleted", async () => {
    const from = (await call("POST", "/spaces", { name: "From" })).body
    const to = (await call("POST", "/spaces", { name: "To" })).body
    const device = (await call("POST", "/devices", { name: "mover", space: { id: from.id } })).body
    const rule = (await call("POST", "/alertRules", {
      name: "Mover hot",
      type: "threshold",
      severity: "low",
      config: { eventName: "t", max: 10 }
    })).body
    const watch = (await call("POST", "/alertRules", { name: "Mover silent", type: "offline", severity: "low", config: { afterSeconds: 60 } })).body
    await call("POST", "/events", { name: "t", data: 50 }, device.secretKey)
    await countsBecome(t, from.id, live(1, 0, 1), "the device online with an alert")
    expect((await call("GET", `/spaces/${to.id}`)).body.live).toEqual(live(0, 0, 0))

    await call("PUT", `/devices/${device.id}`, { space: { id: to.id } })
    expect((await call("GET", `/spaces/${from.id}`)).body.live).toEqual(live(0, 0, 0))
    expect((await call("GET", `/spaces/${to.id}`)).body.live).toEqual(live(1, 0, 1))

    await call("DELETE", `/devices/${device.id}`)
    expect((await call("GET", `/spaces/${to.id}`)).body.live).toEqual(live(0, 0, 0))
    await call("DELETE", `/alertRules/${rule.id}`)
    await call("DELETE", `/alertRules/${watch.id}`)
  })

  it("hold the timezone and alert recipients that the space answers", async () => {
    const admin = (await t.call("POST", "/auth/token", { headers: { "x-app-key": BOOTSTRAP_KEY }, body: { username: ADMIN_EMAIL, password: ADMIN_PASSWORD } }))
      .body.accessToken as string
    const space = (await call("POST", "/spaces", { name: "Zoned", timezone: "Europe/Dublin" })).body
    expect(await entityOf(t, space.id)).toMatchObject({ timezone: "Europe/Dublin", recipients: [] })
    const updated = (await call("PUT", `/spaces/${space.id}`, { timezone: "Asia/Tokyo" })).body
    expect(updated.timezone).toBe("Asia/Tokyo")
    expect((await entityOf(t, space.id)).timezone).toBe("Asia/Tokyo")
    const user = (await call("POST", "/organisations/users/", { emailAddress: `zoned-${kind}@example.com`, fullName: "Zed" }, admin)).body
    const added = (await call("POST", `/spaces/${space.id}/alerts/users/${user.id}`, undefined, admin)).body
    expect(added.live).toEqual(live(0, 0, 0))
    expect(added.alertUsers.map((u: { id: string }) => u.id)).toEqual([user.id])
    expect((await entityOf(t, space.id)).recipients).toEqual([user.id])
    const read = (await call("GET", `/spaces/${space.id}`)).body
    expect(Object.keys(read)).toEqual([
      "id", "clientId", "name", "isPublic", "disabled", "avatar", "owner", "timezone", "country", "createdAt", "updatedAt", "live", "alertUsers"
    ])
    await call("DELETE", `/spaces/${space.id}/alerts/users/${user.id}`, undefined, admin)
    expect((await entityOf(t, space.id)).recipients).toEqual([])
  })
})

describe("space counts across two processes on NATS and Postgres", () => {
  let db: TestDatabase
  let one: Caller
  let two: Caller
  const cores: Array<TestCore> = []
  beforeAll(async () => {
    db = await createPostgresDatabase()
    // Two runners, each with its REST port (the cluster's runner endpoint) on a socket.
    for (let i = 0; i < 2; i++) cores.push(await startCore({ database: db.url }, { listen: true, env: { NATS_URL } }))
    ;[one, two] = cores.map(caller)
  })
  afterAll(async () => {
    for (const core of cores.reverse()) await core.close()
    await db?.drop()
  })

  it("a transition applied on one process shows in the other's space counts", async () => {
    const call = (t: Caller, method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => t.call(method, path, { key, body })
    const space = (await call(one, "POST", "/spaces", { name: "Shared" })).body
    const device = (await call(one, "POST", "/devices", { name: "roamer", space: { id: space.id } })).body
    await call(one, "POST", "/alertRules", {
      name: "Shared silent",
      type: "offline",
      severity: "high",
      autoResolve: true,
      space: { id: space.id },
      config: { afterSeconds: 1 }
    })
    const hot = (await call(one, "POST", "/alertRules", {
      name: "Shared hot",
      type: "threshold",
      severity: "low",
      space: { id: space.id },
      config: { eventName: "t", max: 10 }
    })).body
    // One entity for the space, read from either process.
    expect((await call(one, "GET", `/spaces/${space.id}`)).body.live).toEqual(live(0, 0, 0))
    expect((await call(two, "GET", `/spaces/${space.id}`)).body.live).toEqual(live(0, 0, 0))

    // The device's traffic goes to process two; both read the one count.
    await call(two, "POST", "/events", { name: "t", data: 50 }, device.secretKey)
    await countsBecome(one, space.id, live(1, 0, 1), "online with a threshold alert, on the other process")
    await countsBecome(two, space.id, live(1, 0, 1), "online with a threshold alert, on its own process")

    // Offline on two: one follows.
    await within(10_000, "offline on the device's process", async () => {
      const l = await liveOf(two, space.id)
      return l.devicesOffline === 1 ? l : undefined
    })
    await countsBecome(one, space.id, live(0, 1, 2), "offline on the other process")

    // Resolved over REST on one: two follows.
    const [alert] = (await call(one, "GET", `/alerts?unresolved=true&alertRule.id=${hot.id}`)).body
    await call(one, "PUT", `/alerts/${alert.id}/resolve`, {})
    expect((await call(one, "GET", `/spaces/${space.id}`)).body.live).toEqual(live(0, 1, 1))
    await countsBecome(two, space.id, live(0, 1, 1), "the REST resolution on the other process")

    // Back on one this time: both follow.
    await call(one, "POST", "/events", { name: "ping" }, device.secretKey)
    await countsBecome(one, space.id, live(1, 0, 0), "back online, alert auto-resolved")
    await countsBecome(two, space.id, live(1, 0, 0), "back online on the other process")
  })
})
