import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Context, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { DeviceReads } from "../../src/store/DeviceReads.ts"
import { Sql } from "../../src/store/Sql.ts"
import { BOOTSTRAP_KEY, startApp, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"
import { eventually } from "../support/eventually.ts"

/** Alerts are raised by the device's entity after the event's request returned: how long a test waits for one. */
const RAISED_MS = 3_000

describe.each(STORE_KINDS)("alerts on %s", (kind) => {
  let t: TestApp
  let spaceId: string
  const call = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  const newDevice = async (name: string) => (await call("POST", "/devices", { name, space: { id: spaceId } })).body as { id: string; secretKey: string }
  const publish = (device: { secretKey: string }, name: string, data: unknown) =>
    t.call("POST", "/events", { key: device.secretKey, body: { name, data } })
  /** The alerts of a rule matching `query`, once `done` holds for them. */
  const alertsOnce = async (query: string, done: (alerts: Array<any>) => boolean, what: string) =>
    (await eventually(async () => {
      const alerts = (await call("GET", `/alerts?${query}`)).body as Array<any>
      return done(alerts) ? alerts : undefined
    }, RAISED_MS, what)).value
  const alertOnce = async (id: string, done: (alert: any) => boolean, what: string) =>
    (await eventually(async () => {
      const alert = (await call("GET", `/alerts/${id}`)).body
      return done(alert) ? alert : undefined
    }, RAISED_MS, what)).value
  beforeAll(async () => {
    t = await startAppOn(kind)
    spaceId = (await call("POST", "/spaces", { name: "Plant room" })).body.id
  })
  afterAll(() => t.close())

  it("validates rules per type and names the field", async () => {
    const noBound = await call("POST", "/alertRules", { name: "hot", type: "threshold", severity: "high", config: { eventName: "t" } })
    expect(noBound.status).toBe(400)
    expect(noBound.body.error.field).toBe("config.min")
    const badType = await call("POST", "/alertRules", { name: "x", type: "psychic", severity: "high", config: {} })
    expect(badType.status).toBe(400)
    expect(badType.body.error.field).toBe("type")
    const badSeverity = await call("POST", "/alertRules", { name: "x", type: "offline", severity: "dire", config: { afterSeconds: 5 } })
    expect(badSeverity.body.error.field).toBe("severity")
    const template = await call("POST", "/notificationTemplates", { type: "webhook" })
    expect(template.status).toBe(400)
    expect(template.body.error.field).toBe("webhookUrl")
  })

  it("checks an update against the stored rule's type and the stored template, and changes nothing when it refuses", async () => {
    const rule = (await call("POST", "/alertRules", { name: "hot", type: "threshold", severity: "high", config: { eventName: "t", max: 80 } })).body
    const offlineShaped = await call("PUT", `/alertRules/${rule.id}`, { config: { afterSeconds: 5 } })
    expect(offlineShaped.status).toBe(400)
    expect(offlineShaped.body.error.field).toBe("config.eventName")
    const noBound = await call("PUT", `/alertRules/${rule.id}`, { name: "renamed", config: { eventName: "t" } })
    expect(noBound.status).toBe(400)
    expect(noBound.body.error.field).toBe("config.min")
    expect((await call("GET", `/alertRules/${rule.id}`)).body).toMatchObject({ name: "hot", config: { eventName: "t", max: 80 } })
    // A key another type's config would take is not what decides: the rule's own type is.
    const changed = await call("PUT", `/alertRules/${rule.id}`, { config: { eventName: "t", min: 5, afterSeconds: 3 } })
    expect(changed.status).toBe(200)
    expect(changed.body.config).toEqual({ eventName: "t", min: 5 })
    const offline = (await call("POST", "/alertRules", { name: "gone", type: "offline", severity: "low", config: { afterSeconds: 60 } })).body
    expect((await call("PUT", `/alertRules/${offline.id}`, { config: { eventName: "t", max: 1 } })).body.error.field).toBe("config.afterSeconds")
    expect((await call("PUT", `/alertRules/${offline.id}`, { config: { afterSeconds: 30 } })).body.config).toEqual({ afterSeconds: 30 })
    // Off again: an organisation-wide offline rule would watch the devices of the tests after this one.
    expect((await call("PUT", `/alertRules/${offline.id}`, { enabled: false })).body.enabled).toBe(false)
    expect((await call("PUT", "/alertRules/rul_missing", { config: { afterSeconds: 30 } })).status).toBe(404)

    const email = (await call("POST", "/notificationTemplates", { type: "email", title: "t" })).body
    const toWebhook = await call("PUT", `/notificationTemplates/${email.id}`, { type: "webhook" })
    expect(toWebhook.status).toBe(400)
    expect(toWebhook.body.error.field).toBe("webhookUrl")
    expect((await call("GET", `/notificationTemplates/${email.id}`)).body.type).toBe("email")
    const webhook = (await call("PUT", `/notificationTemplates/${email.id}`, { type: "webhook", webhookUrl: "http://example.test/hook" })).body
    expect(webhook).toMatchObject({ type: "webhook", webhookUrl: "http://example.test/hook" })
    const cleared = await call("PUT", `/notificationTemplates/${email.id}`, { webhookUrl: null })
    expect(cleared.status).toBe(400)
    expect(cleared.body.error.field).toBe("webhookUrl")
    expect((await call("PUT", `/notificationTemplates/${email.id}`, { type: "email", webhookUrl: null })).body).toMatchObject({ type: "email", webhookUrl: null })
  })

  it("opens one alert per rule and device for a threshold breach, repeats it, and auto-resolves when back in range", async () => {
    const device = await newDevice("Boiler")
    const rule = (await call("POST", "/alertRules", {
      name: "Too hot",
      type: "threshold",
      severity: "critical",
      autoResolve: true,
      space: { id: spaceId },
      config: { eventName: "temperature", path: "celsius", max: 80 }
    })).body
    expect(rule).toMatchObject({ type: "threshold", severity: "critical", autoResolve: true, space: { id: spaceId }, enabled: true })

    await publish(device, "temperature", { celsius: 85 })
    const open = await alertsOnce(`unresolved=true&alertRule.id=${rule.id}`, (a) => a.length > 0, "the threshold alert")
    expect(open).toHaveLength(1)
    const alert = open[0]
    expect(alert).toMatchObject({
      state: "unresolved",
      event: { name: "temperature", data: { celsius: 85 } },
      device: { id: device.id, name: "Boiler", space: { id: spaceId } },
      alertRule: { id: rule.id, name: "Too hot", severity: "critical" },
      resolvedAt: null
    })

    const hotter = (await publish(device, "temperature", { celsius: 90 })).body.timestamp as number
    const repeated = await alertOnce(alert.id, (a) => a.lastSeenAt === hotter, "the repeat")
    expect(repeated.lastSeenAt).toBeGreaterThan(alert.lastSeenAt)
    expect((await call("GET", `/alerts?unresolved=true&alertRule.id=${rule.id}`)).body).toHaveLength(1)

    await publish(device, "temperature", { celsius: 60 })
    const resolved = await alertOnce(alert.id, (a) => a.state === "resolved", "the auto-resolution")
    expect(resolved.resolvedAt).not.toBeNull()
    expect((await call("GET", `/alerts?resolved=true&alertRule.id=${rule.id}`)).body.map((a: { id: string }) => a.id)).toEqual([alert.id])

    // A new occurrence opens a new alert; the resolved one stays resolved.
    await publish(device, "temperature", { celsius: 99 })
    const again = await alertsOnce(`unresolved=true&alertRule.id=${rule.id}`, (a) => a.length > 0, "the new occurrence")
    expect(again).toHaveLength(1)
    expect(again[0].id).not.toBe(alert.id)
    expect((await call("GET", `/alerts?space.id=${spaceId}&alertRule.id=${rule.id}`)).body).toHaveLength(2)
    expect((await call("GET", "/alerts?space.id=spc_elsewhere")).body).toEqual([])
  })

  it("a device moved to another space is judged by that space's rules at once", async () => {
    const other = (await call("POST", "/spaces", { name: "Boiler room" })).body
    const here = (await call("POST", "/alertRules", {
      name: "Hot here", type: "threshold", severity: "high", space: { id: spaceId }, config: { eventName: "heat", max: 30 }
    })).body
    const there = (await call("POST", "/alertRules", {
      name: "Hot there", type: "threshold", severity: "high", space: { id: other.id }, config: { eventName: "heat", max: 30 }
    })).body
    const device = await newDevice("Wanderer")
    // In its owner's memory, with the rules of its first space.
    await publish(device, "heat", 20)
    await eventually(async () => {
      const live = (await call("GET", `/devices/${device.id}`)).body.live
      return live.state === "unknown" ? undefined : live
    }, RAISED_MS, "the device's owner to hold it")
    expect((await call("PUT", `/devices/${device.id}`, { space: { id: other.id } })).status).toBe(200)
    await publish(device, "heat", 99)
    const [alert] = await alertsOnce(`device.id=${device.id}`, (a) => a.length > 0, "the alert of the new space's rule")
    expect(alert.alertRule.id).toBe(there.id)
    // A sentinel later than the breach: the old space's rule had its chance and took none.
    await publish(device, "heat", 98)
    await alertOnce(alert.id, (a) => a.lastSeenAt > alert.lastSeenAt, "the repeat")
    expect((await call("GET", `/alerts?device.id=${device.id}`)).body.map((a: { alertRule: { id: string } }) => a.alertRule.id)).toEqual([there.id])
    expect((await call("GET", `/alerts?alertRule.id=${here.id}&device.id=${device.id}`)).body).toEqual([])
  })

  it("a device whose space is deleted leaves that space's rules at once", async () => {
    const doomed = (await call("POST", "/spaces", { name: "Annex" })).body
    await call("POST", "/alertRules", {
      name: "Annex silent", type: "offline", severity: "low", space: { id: doomed.id }, config: { afterSeconds: 600 }
    })
    const device = (await call("POST", "/devices", { name: "Annex meter", space: { id: doomed.id } })).body
    await publish(device, "ping", 1)
    const state = async () => (await call("GET", `/devices/${device.id}`)).body.live.state as string
    await eventually(async () => ((await state()) === "online" ? true : undefined), RAISED_MS, "watched by the annex's offline rule")
    expect((await call("DELETE", `/spaces/${doomed.id}`)).status).toBe(200)
    // Its rule went with the space (and the device's space is none): no offline rule watches it.
    await eventually(async () => ((await state()) === "unwatched" ? true : undefined), RAISED_MS, "no longer watched")
  })

  it("acknowledges, then resolves, idempotently", async () => {
    const device = await newDevice("Pump")
    // Behind a gateway: its alerts name it (the Alert's `gateway`).
    const gateway = (await call("POST", "/gateways", { name: "Yard gateway" })).body
    expect((await call("PUT", `/devices/${device.id}`, { gateway: { id: gateway.id } })).status).toBe(200)
    const rule = (await call("POST", "/alertRules", {
      name: "Pressure",
      type: "threshold",
      severity: "medium",
      config: { eventName: "pressure", min: 1 }
    })).body
    await publish(device, "pressure", 0.2)
    const [alert] = await alertsOnce(`alertRule.id=${rule.id}`, (a) => a.length > 0, "the pressure alert")
    expect(alert.gateway).toEqual({ id: gateway.id })
    const acked = await call("PUT", `/alerts/${alert.id}/resolve`, { acknowledgedAt: 1_800_000_000_000 })
    expect(acked.body).toMatchObject({ state: "acknowledged", acknowledgedAt: 1_800_000_000_000, resolvedAt: null })
    expect((await call("GET", `/alerts?unresolved=true&alertRule.id=${rule.id}`)).body).toHaveLength(1)
    const resolved = await call("PUT", `/alerts/${alert.id}/resolve`, { resolvedAt: 1_800_000_100_000 })
    expect(resolved.body).toMatchObject({ state: "resolved", resolvedAt: 1_800_000_100_000 })
    const twice = await call("PUT", `/alerts/${alert.id}/resolve`, {})
    expect(twice.body.resolvedAt).toBe(1_800_000_100_000)
    // Not auto-resolving: a value back in range leaves an open alert open.
    await publish(device, "pressure", 0.1)
    const [open] = await alertsOnce(`unresolved=true&alertRule.id=${rule.id}`, (a) => a.length > 0, "the next pressure alert")
    const back = (await publish(device, "pressure", 5)).body.timestamp as number
    // A later breach shows that the in-range value before it was taken, and left the alert open.
    await publish(device, "pressure", 0.05)
    const repeated = await alertOnce(open.id, (a) => a.lastSeenAt > back, "the repeat after the in-range value")
    expect(repeated.state).toBe("unresolved")
    expect((await call("GET", "/alerts/alt_missing")).status).toBe(404)
  })

  it("opens an anomaly alert for a value far from the device's recent values", async () => {
    const device = await newDevice("Meter A")
    const rule = (await call("POST", "/alertRules", {
      name: "Odd draw",
      type: "anomaly",
      severity: "medium",
      autoResolve: true,
      config: { eventName: "power", path: "watts", window: 4, zScore: 3 }
    })).body
    for (const watts of [100, 102, 98, 101, 99]) await publish(device, "power", { watts })
    expect((await call("GET", `/alerts?alertRule.id=${rule.id}`)).body).toEqual([])
    await publish(device, "power", { watts: 400 })
    const [alert] = await alertsOnce(`unresolved=true&alertRule.id=${rule.id}`, (a) => a.length > 0, "the anomaly alert")
    // Only the outlier raised one.
    expect((await call("GET", `/alerts?alertRule.id=${rule.id}`)).body).toHaveLength(1)
    expect(alert).toMatchObject({ device: { id: device.id }, alertRule: { id: rule.id }, event: { name: "power", data: { watts: 400 } } })
    expect(alert.note).toMatch(/standard deviations/)
  })

  it("opens an offline alert within a second of the deadline and resolves it when the device returns", async () => {
    const device = await newDevice("Gate sensor")
    const rule = (await call("POST", "/alertRules", {
      name: "Silent",
      type: "offline",
      severity: "high",
      autoResolve: true,
      config: { afterSeconds: 1 }
    })).body
    const seen = await publish(device, "heartbeat", 1)
    const lastSeen = seen.body.timestamp as number
    const opened = await eventually(async () => {
      const list = (await call("GET", `/alerts?unresolved=true&alertRule.id=${rule.id}`)).body as Array<{ id: string; device: { id: string } }>
      return list.find((a) => a.device.id === device.id)
    }, 5_000, "the offline alert")
    expect(opened.at - (lastSeen + 1_000)).toBeLessThan(1_000)
    expect(opened.at).toBeGreaterThanOrEqual(lastSeen + 1_000)

    const back = Date.now()
    await publish(device, "heartbeat", 2)
    const resolved = await eventually(async () => {
      const alert = (await call("GET", `/alerts/${opened.value.id}`)).body
      return alert.state === "resolved" ? alert : undefined
    }, 5_000, "the resolution")
    expect(resolved.at - back).toBeLessThan(1_000)
    await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })

  it("opens each offline rule's alert at its own limit, not at the shortest of them", async () => {
    const yard = (await call("POST", "/spaces", { name: "Yard" })).body
    const offline = (name: string, afterSeconds: number) =>
      call("POST", "/alertRules", { name, type: "offline", severity: "low", autoResolve: true, space: { id: yard.id }, config: { afterSeconds } })
    const soon = (await offline("Quiet a while", 1)).body
    const later = (await offline("Quiet for long", 3)).body
    const device = (await call("POST", "/devices", { name: "Yard light", space: { id: yard.id } })).body
    const lastSeen = (await publish(device, "heartbeat", 1)).body.timestamp as number
    // Its limit after the device's last sign, and a step of its owner's: a few seconds at most.
    const opened = async (rule: { id: string }) =>
      (await eventually(async () => {
        const alerts = (await call("GET", `/alerts?alertRule.id=${rule.id}&device.id=${device.id}`)).body as Array<any>
        return alerts.length > 0 ? alerts[0] : undefined
      }, 10_000, `the alert of ${rule.id}`)).value
    const first = await opened(soon)
    expect(first.firstSeenAt).toBe(lastSeen + 1_000)
    const second = await opened(later)
    expect(second.firstSeenAt).toBe(lastSeen + 3_000)
    await publish(device, "heartbeat", 2)
    await alertOnce(second.id, (a) => a.state === "resolved", "the longer rule's alert resolved on return")
    await alertOnce(first.id, (a) => a.state === "resolved", "the shorter rule's alert resolved on return")
    for (const rule of [soon, later]) await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })

  it("lists each alert exactly as it reads alone, with its count", async () => {
    const product = (await call("POST", "/products", { name: "Listed meter" })).body
    const space = (await call("POST", "/spaces", { name: "Listed" })).body
    const device = (await call("POST", "/devices", { name: "Listed", customId: "listed-1", space: { id: space.id }, product: { id: product.id } })).body
    const bare = (await call("POST", "/devices", { name: "Listed bare", space: { id: space.id } })).body
    const rule = (await call("POST", "/alertRules", {
      name: "Listed hot",
      type: "threshold",
      severity: "medium",
      space: { id: space.id },
      config: { eventName: "reading", path: "value", max: 1 }
    })).body
    await publish(device, "reading", { value: 2.5, unit: "°C", nested: { list: [1, "two", null], big: 12345678901234 } })
    await publish(bare, "reading", { value: 3 })
    const listed = await alertsOnce(`alertRule.id=${rule.id}`, (alerts) => alerts.length === 2, "both alerts")
    const acknowledged = await call("PUT", `/alerts/${listed[0].id}/resolve`, { acknowledgedAt: Date.now() })
    expect(acknowledged.status).toBe(200)
    const res = await call("GET", `/alerts?alertRule.id=${rule.id}&order=createdAt&sort=asc`)
    expect(res.headers.get("x-total-count")).toBe("2")
    expect(res.headers.get("content-type")).toMatch(/^application\/json/)
    expect(res.body).toHaveLength(2)
    for (const alert of res.body) expect(alert).toEqual((await call("GET", `/alerts/${alert.id}`)).body)
    const withEvent = res.body.find((a: any) => a.device.id === device.id)
    expect(withEvent.event.data).toEqual({ value: 2.5, unit: "°C", nested: { list: [1, "two", null], big: 12345678901234 } })
    expect(withEvent.device).toEqual({ id: device.id, name: "Listed", customId: "listed-1", space: { id: space.id }, product: { id: product.id } })
    expect(res.body.find((a: any) => a.device.id === bare.id).device.product).toBeNull()
    expect(withEvent.alertRule).toEqual({ id: rule.id, name: "Listed hot", type: "threshold", severity: "medium", autoResolve: false })
    expect(res.body.some((a: any) => a.acknowledgedAt !== null)).toBe(true)
    await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })

  it("a page of alerts, read from the cache, shows an alert opened, resolved, its rule and device renamed, at once", async () => {
    const device = await newDevice("Cached boiler")
    const rule = (await call("POST", "/alertRules", {
      name: "Cached hot",
      type: "threshold",
      severity: "high",
      space: { id: spaceId },
      config: { eventName: "cached", max: 1 }
    })).body
    const path = `/alerts?alertRule.id=${rule.id}`
    const pages = () => Context.get(t.context, DeviceReads).pages()
    const before = pages()
    // Read twice: the second read is the cached page.
    expect((await call("GET", path)).body).toEqual([])
    expect(pages()).toBe(before + 1)
    expect((await call("GET", path)).body).toEqual([])
    await publish(device, "cached", 5)
    const [opened] = await alertsOnce(`alertRule.id=${rule.id}`, (alerts) => alerts.length === 1, "the alert in the cached list")
    expect((await call("GET", path)).body).toEqual([opened])
    await call("PUT", `/alertRules/${rule.id}`, { name: "Cached very hot" })
    expect((await call("GET", path)).body[0].alertRule.name).toBe("Cached very hot")
    await call("PUT", `/devices/${device.id}`, { name: "Cached boiler 2" })
    expect((await call("GET", path)).body[0].device.name).toBe("Cached boiler 2")
    const resolved = await call("PUT", `/alerts/${opened.id}/resolve`, {})
    expect(resolved.status).toBe(200)
    const listed = (await call("GET", path)).body
    expect(listed[0].state).toBe("resolved")
    expect(listed[0]).toEqual((await call("GET", `/alerts/${opened.id}`)).body)
    expect((await call("GET", `${path}&unresolved=true`)).body).toEqual([])
    await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })

  it("shows live counts on the space", async () => {
    const space = (await call("POST", "/spaces", { name: "Counted" })).body
    const device = (await call("POST", "/devices", { name: "Counted", space: { id: space.id } })).body
    const rule = (await call("POST", "/alertRules", {
      name: "Counted hot",
      type: "threshold",
      severity: "low",
      space: { id: space.id },
      config: { eventName: "t", max: 1 }
    })).body
    await publish(device, "t", 5)
    const live = await eventually(async () => {
      const body = (await call("GET", `/spaces/${space.id}`)).body
      return body.live.openAlerts === 1 && body.live.devicesOnline + body.live.devicesOffline === 0 ? body.live : undefined
    }, 3_000, "the open alert count")
    expect(live.value).toEqual({ devicesOnline: 0, devicesOffline: 0, openAlerts: 1 })
    await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })
})

/** Two starts of an on-disk PGlite store (its first start creates the database: seconds on a loaded machine). */
const RESTART_TEST_MS = 90_000
/** The offline rule of the restart test whose deadline falls after the restart. */
const AFTER_RESTART_S = 10

/** Waits until the device's actor stored its snapshot as online. */
const onlineInStore = (t: TestApp, deviceId: string) =>
  eventually(async () => {
    const [row] = await Effect.runPromise(
      Effect.provideContext(Sql.use((sql) => sql.query<{ value: string }>("SELECT snapshot->>'value' AS value FROM device_actors WHERE device_id = $1", [deviceId])), t.context)
    )
    return row?.value === "online" ? true : undefined
  }, RAISED_MS, "the device online in the store")

describe("offline timers across a restart", () => {
  let dir: string
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "voltaic-alerts-"))
  })
  afterAll(() => rm(dir, { recursive: true, force: true }))

  it("rehydrates a device with the signs of life its actor only noted: the alert counts from the last one", async () => {
    const own = await mkdtemp(join(tmpdir(), "voltaic-alerts-"))
    const first = await startApp({ DATA_DIR: own })
    const call = (t: TestApp, method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
    const space = (await call(first, "POST", "/spaces", { name: "S" })).body
    const device = (await call(first, "POST", "/devices", { name: "Chatty", space: { id: space.id } })).body
    const rule = (await call(first, "POST", "/alertRules", { name: "Gone", type: "offline", severity: "low", config: { afterSeconds: 3 } })).body
    // The first event brings the actor online (its snapshot is written); the later ones are
    // only noted on it, and reach the store in the device's row alone.
    await first.call("POST", "/events", { key: device.secretKey, body: { name: "hello", data: 1 } })
    await onlineInStore(first, device.id)
    let last = 0
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 200))
      last = (await first.call("POST", "/events", { key: device.secretKey, body: { name: "hello", data: i } })).body.timestamp as number
    }
    await first.close()

    const second = await startApp({ DATA_DIR: own })
    try {
      const opened = await eventually(async () => {
        const list = (await call(second, "GET", `/alerts?alertRule.id=${rule.id}`)).body as Array<{ firstSeenAt: number }>
        return list.length > 0 ? list : undefined
      }, 8_000, "the offline alert after restart")
      expect(opened.value).toHaveLength(1)
      // From the last event (in the device's row), not the first (in the stored snapshot).
      expect(opened.value[0].firstSeenAt).toBe(last + 3_000)
    } finally {
      await second.close()
      await rm(own, { recursive: true, force: true })
    }
  }, RESTART_TEST_MS)

  it("opens the alert on time for a device that fell silent while the server was down", async () => {
    const first = await startApp({ DATA_DIR: dir })
    const call = (t: TestApp, method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
    const space = (await call(first, "POST", "/spaces", { name: "S" })).body
    const device = (await call(first, "POST", "/devices", { name: "Quiet", space: { id: space.id } })).body
    // A deadline past the restart even on a loaded machine (CI runs suites side by side on two cores,
    // where a close and a start took over 3 s): it must be the rehydrated timer that fires it.
    const rule = (await call(first, "POST", "/alertRules", { name: "Gone", type: "offline", severity: "low", config: { afterSeconds: AFTER_RESTART_S } })).body
    const seen = await first.call("POST", "/events", { key: device.secretKey, body: { name: "hello", data: 1 } })
    await onlineInStore(first, device.id)
    await first.close()

    const second = await startApp({ DATA_DIR: dir })
    const deadline = (seen.body.timestamp as number) + AFTER_RESTART_S * 1000
    try {
      expect(Date.now()).toBeLessThan(deadline)
      // Nothing from the device after the restart: only the rehydrated timer can open the alert.
      const opened = await eventually(async () => {
        const list = (await call(second, "GET", `/alerts?alertRule.id=${rule.id}`)).body as Array<unknown>
        return list.length > 0 ? list : undefined
      }, AFTER_RESTART_S * 1000 + 5_000, "the offline alert after restart")
      expect(opened.at).toBeGreaterThanOrEqual(deadline)
      expect(opened.at - deadline).toBeLessThan(1_000)
      expect(opened.value).toHaveLength(1)
    } finally {
      await second.close()
    }
  }, RESTART_TEST_MS)
})
