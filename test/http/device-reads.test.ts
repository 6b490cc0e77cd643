import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { DeviceReads } from "../../src/store/DeviceReads.ts"
import { Context, Effect } from "effect"
import { Sql } from "../../src/store/Sql.ts"
import { BOOTSTRAP_KEY, startApp, startAppOn, type TestApp } from "../support/app.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"
import { until } from "../support/eventually.ts"

/** What the tests read of a listed space. */
interface SpaceItem {
  readonly id: string
  readonly name: string
  readonly live: { readonly devicesOnline: number }
  readonly alertUsers: ReadonlyArray<unknown>
}

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

/** Device reads come from a cache: every change that shows in a device must show at once. */
describe.each(STORE_KINDS)("cached device reads on %s", (kind) => {
  let t: TestApp
  const call = (method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => t.call(method, path, { key, body })
  let home: string
  beforeAll(async () => {
    t = await startAppOn(kind)
    home = (await call("POST", "/spaces", { name: "Home" })).body.id
  })
  afterAll(() => t.close())

  const cached = () => Context.get(t.context, DeviceReads).size()

  it("serves a repeated read from the cache with the same body", async () => {
    const device = (await call("POST", "/devices", { name: "meter", space: { id: home } })).body
    const { secretKey: _, ...plain } = device
    const first = await call("GET", `/devices/${device.id}`)
    const before = cached()
    const second = await call("GET", `/devices/${device.id}`)
    expect(first.status).toBe(200)
    expect(first.headers.get("content-type")).toMatch(/^application\/json/)
    expect(second.body).toEqual(first.body)
    expect(second.body).toEqual(plain)
    expect(before).toBeGreaterThan(0)
    expect(cached()).toBe(before)
  })

  it("shows an update, a renamed space and product, and a deletion at once", async () => {
    const space = (await call("POST", "/spaces", { name: "Hall" })).body
    const product = (await call("POST", "/products", { name: "Meter v1" })).body
    const device = (await call("POST", "/devices", { name: "a", space: { id: space.id }, product: { id: product.id } })).body
    expect((await call("GET", `/devices/${device.id}`)).body.name).toBe("a")
    await call("PUT", `/devices/${device.id}`, { name: "b" })
    expect((await call("GET", `/devices/${device.id}`)).body.name).toBe("b")
    await call("PUT", `/spaces/${space.id}`, { name: "Hall 2" })
    expect((await call("GET", `/devices/${device.id}`)).body.space.name).toBe("Hall 2")
    await call("PUT", `/products/${product.id}`, { name: "Meter v2" })
    expect((await call("GET", `/devices/${device.id}`)).body.product.name).toBe("Meter v2")
    await call("DELETE", `/spaces/${space.id}`)
    expect((await call("GET", `/devices/${device.id}`)).body.space).toBeNull()
    await call("DELETE", `/devices/${device.id}`)
    expect((await call("GET", `/devices/${device.id}`)).status).toBe(404)
  })

  it("shows lastSeenAt moved by an event and updatedAt moved by a key rotation", async () => {
    const device = (await call("POST", "/devices", { name: "sensor", space: { id: home } })).body
    const read = await call("GET", `/devices/${device.id}`)
    expect(read.body.lastSeenAt).toBeNull()
    expect((await call("GET", "/devices/me", undefined, device.secretKey)).body.lastSeenAt).toBeNull()
    const posted = await call("POST", "/events", { name: "temperature", data: 21 }, device.secretKey)
    expect(posted.status).toBe(200)
    const seen = (await call("GET", `/devices/${device.id}`)).body.lastSeenAt
    expect(typeof seen).toBe("number")
    expect((await call("GET", "/devices/me", undefined, device.secretKey)).body.lastSeenAt).toBe(seen)
    await new Promise((resolve) => setTimeout(resolve, 5))
    const rotated = await call("POST", `/devices/${device.id}/secretKey`)
    expect(rotated.status).toBe(200)
    expect((await call("GET", `/devices/${device.id}`)).body.updatedAt).toBeGreaterThan(read.body.updatedAt)
  })

  it("answers live fields from the machine's row for a device no owner holds, alone and in a list", async () => {
    const device = (await call("POST", "/devices", { name: "asleep", space: { id: home } })).body
    expect(device.live).toEqual({ isOnline: false, state: "unknown", lastSeenAt: null })
    // As an owner leaves it when the device leaves memory: its machine's snapshot in its row.
    const sql = Context.get(t.context, Sql)
    await Effect.runPromise(sql.query(
      `INSERT INTO device_actors (device_id, snapshot, liveness, liveness_at, updated_at)
       VALUES ($1, $2::text::jsonb, 'offline', 5000, 5000)`,
      [device.id, JSON.stringify({ status: "active", value: "offline", context: { deviceId: device.id, lastSeenAt: 4000 } })]
    ))
    const live = { isOnline: false, state: "offline", lastSeenAt: 4000 }
    const alone = (await call("GET", `/devices/${device.id}`)).body
    expect(alone).toMatchObject({ id: device.id, lastSeenAt: 4000, live })
    const listed = (await call("GET", `/devices?space.id=${home}&limit=200`)).body.find((d: { id: string }) => d.id === device.id)
    expect(listed).toEqual(alone)
    expect(Object.keys(listed)).not.toContain("stored")
    // The row is kept with the cached read; the next time the device leaves memory its owner
    // writes the row again and says so (`left`), and the read shows the new row at once.
    await Effect.runPromise(sql.query(
      "UPDATE device_actors SET snapshot = $2::text::jsonb, liveness = 'online', liveness_at = 9000 WHERE device_id = $1",
      [device.id, JSON.stringify({ status: "active", value: "online", context: { deviceId: device.id, lastSeenAt: 8000 } })]
    ))
    expect((await call("GET", `/devices/${device.id}`)).body).toEqual(alone)
    await Effect.runPromise(Context.get(t.context, DeviceReads).left([device.id]))
    const after = (await call("GET", `/devices/${device.id}`)).body
    expect(after).toMatchObject({ id: device.id, lastSeenAt: 8000, live: { isOnline: true, state: "online", lastSeenAt: 8000 } })
  })

  const pages = () => Context.get(t.context, DeviceReads).pages()
  const names = (body: Array<{ name: string }>) => body.map((d) => d.name)

  it("serves a repeated list from the cache, and shows a device created, updated or deleted at once", async () => {
    const space = (await call("POST", "/spaces", { name: "Listed" })).body
    const path = `/devices?space.id=${space.id}&limit=20&order=name&sort=ASC`
    await call("POST", "/devices", { name: "a", space: { id: space.id } })
    const first = await call("GET", path)
    expect(names(first.body)).toEqual(["a"])
    expect(first.headers.get("x-total-count")).toBe("1")
    const held = pages()
    expect(held).toBeGreaterThan(0)
    expect((await call("GET", path)).body).toEqual(first.body)
    expect(pages()).toBe(held)

    const b = (await call("POST", "/devices", { name: "b", space: { id: space.id } })).body
    const two = await call("GET", path)
    expect(names(two.body)).toEqual(["a", "b"])
    expect(two.headers.get("x-total-count")).toBe("2")
    await call("PUT", `/devices/${b.id}`, { name: "c" })
    expect(names((await call("GET", path)).body)).toEqual(["a", "c"])
    await call("PUT", `/spaces/${space.id}`, { name: "Listed 2" })
    expect((await call("GET", path)).body.map((d: { space: { name: string } }) => d.space.name)).toEqual(["Listed 2", "Listed 2"])
    await call("DELETE", `/devices/${b.id}`)
    const one = await call("GET", path)
    expect(names(one.body)).toEqual(["a"])
    expect(one.headers.get("x-total-count")).toBe("1")
  })

  it("shows a device an ingest created by its new customId at once", async () => {
    const path = `/devices?search=auto-${kind}`
    expect((await call("GET", path)).body).toEqual([])
    const posted = await call("POST", "/events", { name: "boot", device: { customId: `auto-${kind}-1` } })
    expect(posted.status).toBe(200)
    const listed = await call("GET", path)
    expect(listed.body.map((d: { customId: string }) => d.customId)).toEqual([`auto-${kind}-1`])
    expect(listed.body[0].lastSeenAt).toBe(posted.body.timestamp)
  })

  it("reorders a list by lastSeenAt at once when a device is seen, and shows its lastSeenAt", async () => {
    const space = (await call("POST", "/spaces", { name: "Seen" })).body
    const x = (await call("POST", "/devices", { name: "x", space: { id: space.id } })).body
    const y = (await call("POST", "/devices", { name: "y", space: { id: space.id } })).body
    const path = `/devices?space.id=${space.id}&order=lastSeenAt&sort=DESC`
    const ping = async (key: string) => {
      expect((await call("POST", "/events", { name: "ping" }, key)).status).toBe(200)
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    await ping(x.secretKey)
    await ping(y.secretKey)
    const before = (await call("GET", path)).body
    expect(names(before)).toEqual(["y", "x"])
    expect((await call("GET", path)).body).toEqual(before)
    // A page without the device seen changes too.
    expect(names((await call("GET", `${path}&limit=1`)).body)).toEqual(["y"])
    await ping(x.secretKey)
    expect(names((await call("GET", `${path}&limit=1`)).body)).toEqual(["x"])
    const after = (await call("GET", path)).body
    expect(names(after)).toEqual(["x", "y"])
    expect(after[0].lastSeenAt).toBeGreaterThan(before[0].lastSeenAt)
    // A device never seen is the least recently seen: last of DESC, first of ASC.
    await call("POST", "/devices", { name: "never", space: { id: space.id } })
    expect(names((await call("GET", path)).body)).toEqual(["x", "y", "never"])
    expect(names((await call("GET", path.replace("sort=DESC", "sort=ASC"))).body)).toEqual(["never", "y", "x"])
  })

  it("embeds the device's latest event and location, in its read, its page and /devices/me, at once as they change", async () => {
    const space = (await call("POST", "/spaces", { name: "Latest" })).body
    const device = (await call("POST", "/devices", { name: "tracker", space: { id: space.id } })).body
    const path = `/devices?space.id=${space.id}`
    const fresh = (await call("GET", `/devices/${device.id}`)).body
    expect(fresh).toMatchObject({ events: [], location: null })
    expect((await call("GET", path)).body[0]).toMatchObject({ events: [], location: null })
    const first = (await call("POST", "/events", { name: "temp", data: { c: 20 }, timestamp: 1_800_000_000_000 }, device.secretKey)).body
    // An older event (by its timestamp) is not the latest.
    await call("POST", "/events", { name: "late", data: 1, timestamp: 1_700_000_000_000 }, device.secretKey)
    const placed = (await call("POST", "/locations", { latitude: 51.5, longitude: -0.12 }, device.secretKey)).body
    const read = (await call("GET", `/devices/${device.id}`)).body
    expect(read.events).toEqual([(await call("GET", `/events/${first.id}`)).body])
    expect(read.location).toEqual((await call("GET", `/locations/${placed.id}`)).body)
    expect((await call("GET", path)).body[0]).toMatchObject({ events: read.events, location: read.location })
    expect((await call("GET", "/devices/me", undefined, device.secretKey)).body).toMatchObject({ events: read.events, location: read.location })
    const newer = (await call("POST", "/events", { name: "temp", data: { c: 21 }, timestamp: 1_800_000_000_500 }, device.secretKey)).body
    const moved = (await call("POST", "/locations", { latitude: 48.85, longitude: 2.35, altitude: 35 }, device.secretKey)).body
    const again = (await call("GET", `/devices/${device.id}`)).body
    expect(again.events.map((e: { id: string }) => e.id)).toEqual([newer.id])
    expect(again.location).toMatchObject({ id: moved.id, latitude: "48.85", longitude: "2.35", altitude: "35" })
    expect((await call("GET", path)).body[0].location.id).toBe(moved.id)
  })

  it("answers a cached page's device from its row once it left its owner's memory", async () => {
    const space = (await call("POST", "/spaces", { name: "Asleep" })).body
    const device = (await call("POST", "/devices", { name: "dozing", space: { id: space.id } })).body
    const path = `/devices?space.id=${space.id}`
    expect((await call("GET", path)).body[0].live).toEqual({ isOnline: false, state: "unknown", lastSeenAt: null })
    // What an owner leaves behind: the machine's snapshot in its row, then `left` (DeviceBucket's sweep).
    const sql = Context.get(t.context, Sql)
    await Effect.runPromise(sql.query(
      `INSERT INTO device_actors (device_id, snapshot, liveness, liveness_at, updated_at)
       VALUES ($1, $2::text::jsonb, 'offline', 5000, 5000)`,
      [device.id, JSON.stringify({ status: "active", value: "offline", context: { deviceId: device.id, lastSeenAt: 4000 } })]
    ))
    await Effect.runPromise(Context.get(t.context, DeviceReads).left([device.id]))
    expect((await call("GET", path)).body[0]).toMatchObject({ lastSeenAt: 4000, live: { isOnline: false, state: "offline", lastSeenAt: 4000 } })
  })

  it("serves a device's events list from the cache, shows its new event at once, and still refuses another organisation", async () => {
    const a = (await call("POST", "/devices", { name: "ev-a", space: { id: home } })).body
    const b = (await call("POST", "/devices", { name: "ev-b", space: { id: home } })).body
    const post = async (key: string, name: string) => expect((await call("POST", "/events", { name, data: 1 }, key)).status).toBe(200)
    await post(a.secretKey, "one")
    const mine = `/events?device.id=${a.id}&limit=100`
    const first = (await call("GET", mine)).body
    expect(first.events.map((e: { name: string }) => e.name)).toEqual(["one"])
    expect(first.count).toBe(1)
    const held = pages()
    expect((await call("GET", mine)).body).toEqual(first)
    expect(pages()).toBe(held)
    // The device reads its own history (a page of its own key: the same rows).
    expect((await call("GET", "/events?limit=100", undefined, a.secretKey)).body).toEqual(first)

    await post(a.secretKey, "two")
    const second = (await call("GET", mine)).body
    expect(second.events.map((e: { name: string }) => e.name).sort()).toEqual(["one", "two"])
    expect(second.count).toBe(2)
    // Another device's event leaves a's page where it was.
    const b1 = (await call("GET", `/events?device.id=${b.id}&limit=100`)).body
    const before = pages()
    await post(b.secretKey, "three")
    expect(pages()).toBe(before - 1)
    expect((await call("GET", `/events?device.id=${b.id}&limit=100`)).body.count).toBe(b1.count + 1)
    expect((await call("GET", mine)).body).toEqual(second)

    const other = await call("POST", "/organisations", {
      name: "Elsewhere",
      owner: { emailAddress: `ev-${kind}@example.com`, fullName: "E Owner", password: "elsewhere owner password" }
    })
    expect((await call("GET", mine, undefined, other.body.apiKey.secretKey)).status).toBe(404)
  })

  it("serves a repeated spaces list from the cache, and shows a rename, recipients, live counts and a deletion at once", async () => {
    const space = (await call("POST", "/spaces", { name: "Loft" })).body
    const list = "/spaces?limit=100"
    const item = async () => {
      const reply = await call("GET", list)
      expect(reply.status).toBe(200)
      expect(reply.headers.get("x-total-count")).toBe(String(reply.body.count))
      return (reply.body.spaces as Array<SpaceItem>).find((s) => s.id === space.id)
    }
    const first = await item()
    const held = pages()
    // The list's item is the single read, field for field and in its order.
    const single = (await call("GET", `/spaces/${space.id}`)).body
    expect(first).toEqual(single)
    expect(Object.keys(first ?? {})).toEqual(Object.keys(single))
    expect(await item()).toEqual(first)
    expect(pages()).toBe(held)

    await call("PUT", `/spaces/${space.id}`, { name: "Loft 2" })
    expect((await item())?.name).toBe("Loft 2")

    const member = (await call("POST", "/organisations/users/", { emailAddress: `loft-${kind}@example.com`, fullName: "Loft Keeper" })).body
    expect((await call("POST", `/spaces/${space.id}/alerts/users/${member.id}`)).status).toBe(200)
    expect((await item())?.alertUsers).toEqual([{ id: member.id, fullName: "Loft Keeper", emailAddress: `loft-${kind}@example.com` }])
    expect(Object.keys((await item()) ?? {})).toEqual(Object.keys((await call("GET", `/spaces/${space.id}`)).body))
    expect((await call("DELETE", `/spaces/${space.id}/alerts/users/${member.id}`)).status).toBe(200)
    expect((await item())?.alertUsers).toEqual([])
    expect((await call("POST", `/spaces/${space.id}/alerts/users/${member.id}`)).status).toBe(200)
    expect((await item())?.alertUsers).toHaveLength(1)
    expect((await call("DELETE", `/organisations/users/${member.id}`)).status).toBe(200)
    expect((await item())?.alertUsers).toEqual([])

    // Live counts come from the space per answer, the rest from the cached page (a device is
    // online or offline where an offline rule watches it).
    const device = (await call("POST", "/devices", { name: "loft meter", space: { id: space.id } })).body
    expect((await call("POST", "/alertRules", {
      name: "Loft silent", type: "offline", severity: "low", space: { id: space.id }, config: { afterSeconds: 3_600 }
    })).status).toBe(200)
    const cachedAgain = await item()
    const heldAgain = pages()
    expect(cachedAgain?.live.devicesOnline).toBe(0)
    expect((await call("POST", "/events", { name: "temperature", data: 20 }, device.secretKey)).status).toBe(200)
    await until(async () => (await item())?.live.devicesOnline === 1, 5_000, "the space counting its device online")
    expect(pages()).toBe(heldAgain)

    await call("DELETE", `/spaces/${space.id}`)
    expect(await item()).toBeUndefined()
    // A space created shows in the cached page at once.
    const added = (await call("POST", "/spaces", { name: "Cellar" })).body
    expect((await call("GET", list)).body.spaces.map((s: SpaceItem) => s.id)).toContain(added.id)
  })

  it("holds at most 20,000 items in pages, the oldest pages going first", async () => {
    const reads = Context.get(t.context, DeviceReads)
    let loads = 0
    const read = (n: number) =>
      Effect.runPromise(reads.page("org-evict", `evict ${n}`, { devices: (p) => p.items.map((d) => d.id), anySign: false }, Effect.sync(() => {
        loads++
        return { items: Array.from({ length: 5_000 }, (_, i) => ({ id: `evict-${n}-${i}` })), total: 5_000 }
      })))
    for (let n = 0; n < 5; n++) await read(n)
    expect(loads).toBe(5)
    await read(4)
    await read(1)
    expect(loads).toBe(5)
    await read(0)
    expect(loads).toBe(6)
  })

  it("never answers another organisation's device from the cache", async () => {
    const device = (await call("POST", "/devices", { name: "mine", space: { id: home } })).body
    expect((await call("GET", `/devices/${device.id}`)).status).toBe(200)
    const other = await call("POST", "/organisations", {
      name: "Other",
      owner: { emailAddress: `o-${kind}@example.com`, fullName: "O Owner", password: "other owner password" }
    })
    expect(other.status).toBe(200)
    const foreign = await call("GET", `/devices/${device.id}`, undefined, other.body.apiKey.secretKey)
    expect(foreign.status).toBe(404)
    expect((await call("GET", `/devices/${device.id}`)).status).toBe(200)
  })
})

describe("cached device reads across two processes on NATS and Postgres", () => {
  let db: TestDatabase
  let one: TestApp
  let two: TestApp
  let home: string
  beforeAll(async () => {
    db = await createPostgresDatabase()
    // Two runners of one cluster: each serves the runner endpoint the other calls.
    one = await startApp({ DATABASE_URL: db.url, NATS_URL }, { listen: true })
    two = await startApp({ DATABASE_URL: db.url, NATS_URL }, { listen: true })
    home = (await one.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Home" } })).body.id
  })
  afterAll(async () => {
    await one?.close()
    await two?.close()
    await db?.drop()
  })

  /** What one process wrote shows on the other within 2 s (a bus notice, at most once). */
  const shows = (check: () => Promise<boolean>) => until(check, 2_000, "the write showing on the other process")

  it("an update on one process shows on the other's cached read", async () => {
    const device = (await one.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "before", space: { id: home } } })).body
    expect((await two.call("GET", `/devices/${device.id}`, { key: BOOTSTRAP_KEY })).body.name).toBe("before")
    await one.call("PUT", `/devices/${device.id}`, { key: BOOTSTRAP_KEY, body: { name: "after" } })
    await shows(async () => (await two.call("GET", `/devices/${device.id}`, { key: BOOTSTRAP_KEY })).body.name === "after")
    await one.call("POST", "/events", { key: device.secretKey, body: { name: "ping" } })
    await shows(async () => typeof (await two.call("GET", `/devices/${device.id}`, { key: BOOTSTRAP_KEY })).body.lastSeenAt === "number")
  })

  it("an alert resolved on one process shows in the other's cached page of alerts", async () => {
    const device = (await one.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "alarm", space: { id: home } } })).body
    const rule = (await one.call("POST", "/alertRules", {
      key: BOOTSTRAP_KEY,
      body: { name: "Shared hot", type: "threshold", severity: "low", space: { id: home }, config: { eventName: "shared", max: 1 } }
    })).body
    const path = `/alerts?alertRule.id=${rule.id}`
    await one.call("POST", "/events", { key: device.secretKey, body: { name: "shared", data: 5 } })
    await shows(async () => (await two.call("GET", path, { key: BOOTSTRAP_KEY })).body.length === 1)
    const [alert] = (await two.call("GET", path, { key: BOOTSTRAP_KEY })).body
    expect(alert.state).not.toBe("resolved")
    expect((await one.call("PUT", `/alerts/${alert.id}/resolve`, { key: BOOTSTRAP_KEY, body: {} })).status).toBe(200)
    await shows(async () => (await two.call("GET", path, { key: BOOTSTRAP_KEY })).body[0].state === "resolved")
    await one.call("PUT", `/alertRules/${rule.id}`, { key: BOOTSTRAP_KEY, body: { name: "Shared very hot" } })
    await shows(async () => (await two.call("GET", path, { key: BOOTSTRAP_KEY })).body[0].alertRule.name === "Shared very hot")
  })

  it("a space renamed or given a recipient on one process shows in the other's cached page of spaces", async () => {
    const space = (await one.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Attic" } })).body
    const item = async () =>
      ((await two.call("GET", "/spaces?limit=100", { key: BOOTSTRAP_KEY })).body.spaces as Array<SpaceItem>).find((s) => s.id === space.id)
    expect((await item())?.name).toBe("Attic")
    await one.call("PUT", `/spaces/${space.id}`, { key: BOOTSTRAP_KEY, body: { name: "Attic 2" } })
    await shows(async () => (await item())?.name === "Attic 2")
    const member = (await one.call("POST", "/organisations/users/", { key: BOOTSTRAP_KEY, body: { emailAddress: "attic@example.com", fullName: "Attic Keeper" } })).body
    expect((await one.call("POST", `/spaces/${space.id}/alerts/users/${member.id}`, { key: BOOTSTRAP_KEY })).status).toBe(200)
    await shows(async () => (await item())?.alertUsers.length === 1)
  })

  it("a device created on one process shows in the other's cached list", async () => {
    const space = (await one.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Shared" } })).body
    const path = `/devices?space.id=${space.id}`
    await one.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "first", space: { id: space.id } } })
    expect((await two.call("GET", path, { key: BOOTSTRAP_KEY })).body).toHaveLength(1)
    expect((await two.call("GET", path, { key: BOOTSTRAP_KEY })).body).toHaveLength(1)
    await one.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "second", space: { id: space.id } } })
    await shows(async () => (await two.call("GET", path, { key: BOOTSTRAP_KEY })).body.length === 2)
  })
})
