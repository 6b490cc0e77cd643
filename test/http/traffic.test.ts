import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"

describe.each(STORE_KINDS)("events, locations and commands over REST on %s", (kind) => {
  let t: TestApp
  let deviceId: string
  let deviceKey: string
  const app = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  beforeAll(async () => {
    t = await startAppOn(kind)
    const space = await app("POST", "/spaces", { name: "Site" })
    const device = await app("POST", "/devices", { name: "Sensor", space: { id: space.body.id } })
    deviceId = device.body.id
    deviceKey = device.body.secretKey
  })
  afterAll(() => t.close())

  it("stores an event published with a device key and updates lastSeenAt", async () => {
    const before = Date.now()
    const res = await t.call("POST", "/events", { key: deviceKey, body: { name: "temperature", data: { celsius: 21.5 } } })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ name: "temperature", data: { celsius: 21.5 }, device: { id: deviceId } })
    expect(res.body.id).toMatch(/^evt_/)
    expect(res.body.timestamp).toBeGreaterThanOrEqual(before)
    const read = await app("GET", `/events/${res.body.id}`)
    expect(read.body).toEqual(res.body)
    const device = await app("GET", `/devices/${deviceId}`)
    expect(device.body.lastSeenAt).toBeGreaterThanOrEqual(before)
  })

  it("lets an application publish for a device by id, and by customId creating it", async () => {
    const byId = await app("POST", "/events", { name: "door", data: "open", device: { id: deviceId } })
    expect(byId.body.device.id).toBe(deviceId)
    const byCustom = await app("POST", "/events", { name: "door", data: "closed", "device.customId": "gate-7" })
    expect(byCustom.status).toBe(200)
    const again = await app("POST", "/events", { name: "door", data: "open", device: { customId: "gate-7" } })
    expect(again.body.device.id).toBe(byCustom.body.device.id)
    const created = await app("GET", `/devices/${byCustom.body.device.id}`)
    expect(created.body.customId).toBe("gate-7")
  })

  it("refuses bad events and stores nothing", async () => {
    const cases: Array<[unknown, number, string]> = [
      [{ data: 1 }, 400, "name"],
      [{ name: "a/b" }, 400, "name"],
      [{ name: "x", device: { id: "dev_unknown" } }, 404, ""],
      [{ name: "x" }, 400, "device"],
      [{ name: "x", timestamp: "not a time", device: { id: deviceId } }, 400, "timestamp"]
    ]
    const before = (await app("GET", `/events?device.id=${deviceId}&limit=200`)).body.count
    for (const [body, status, field] of cases) {
      const res = await app("POST", "/events", body)
      expect(res.status, JSON.stringify(body)).toBe(status)
      if (field) expect(res.body.error.field).toBe(field)
    }
    expect((await app("GET", `/events?device.id=${deviceId}&limit=200`)).body.count).toBe(before)
    const big = await app("POST", "/events", { name: "blob", data: "x".repeat(300 * 1024), device: { id: deviceId } })
    expect(big.status).toBe(413)
  })

  it("refuses a device key acting for another device", async () => {
    const res = await t.call("POST", "/events", { key: deviceKey, body: { name: "x", device: { id: "dev_other" } } })
    expect(res.status).toBe(403)
  })

  it("lists a device's events by name and time, newest first by default", async () => {
    for (const n of [1, 2, 3]) await app("POST", "/events", { name: "count", data: n, timestamp: 1_700_000_000_000 + n, device: { id: deviceId } })
    const res = await app("GET", `/events?device.id=${deviceId}&name=count`)
    expect(res.body.events.map((e: { data: number }) => e.data)).toEqual([3, 2, 1])
    expect(res.body.count).toBe(3)
    const ranged = await app("GET", `/events?device.id=${deviceId}&name=count&since=1700000000002&until=1700000000003`)
    expect(ranged.body.events.map((e: { data: number }) => e.data)).toEqual([2])
    expect((await app("GET", "/events")).status).toBe(400)
    const asDevice = await t.call("GET", "/events?name=count", { key: deviceKey })
    expect(asDevice.body.count).toBe(3)
  })

  it("keeps an event's file and serves it back", async () => {
    const form = new FormData()
    form.set("name", "photo")
    form.set("data", JSON.stringify({ camera: 1 }))
    form.set("device.id", deviceId)
    form.set("file", new File([new Uint8Array([1, 2, 3, 250])], "p.bin", { type: "application/octet-stream" }))
    const res = await t.app.request("/v1/events", { method: "POST", body: form, headers: { authorization: `Bearer ${BOOTSTRAP_KEY}` } })
    expect(res.status).toBe(200)
    const event = await res.json()
    expect(event).toMatchObject({ name: "photo", data: { camera: 1 }, file: { filename: "p.bin", size: 4 } })
    const file = await t.app.request(`/v1/events/${event.id}/file`, { headers: { authorization: `Bearer ${BOOTSTRAP_KEY}` } })
    expect(file.status).toBe(200)
    expect([...new Uint8Array(await file.arrayBuffer())]).toEqual([1, 2, 3, 250])
  })

  it("stores locations with coordinates returned as strings", async () => {
    const res = await t.call("POST", "/locations", { key: deviceKey, body: { latitude: "53.3498", longitude: -6.2603, altitude: 12 } })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ latitude: "53.3498", longitude: "-6.2603", altitude: "12", device: { id: deviceId } })
    const read = await app("GET", `/locations/${res.body.id}`)
    expect(read.body).toEqual(res.body)
    const list = await app("GET", `/locations?device.id=${deviceId}`)
    expect(list.body.locations[0].id).toBe(res.body.id)
    const bad = await t.call("POST", "/locations", { key: deviceKey, body: { latitude: 91, longitude: 0 } })
    expect(bad.status).toBe(400)
    expect(bad.body.error.field).toBe("latitude")
  })

  it("creates commands with unique slugs and runs them", async () => {
    const cmd = await app("POST", "/commands", { name: "Reboot Now", device: { id: deviceId } })
    expect(cmd.status).toBe(200)
    expect(cmd.body).toMatchObject({ name: "Reboot Now", slug: "reboot-now", device: { id: deviceId } })
    expect((await app("POST", "/commands", { name: "reboot now", device: { id: deviceId } })).status).toBe(409)
    const run = await app("POST", "/commands/run", { slug: "reboot-now", device: { id: deviceId }, data: { delay: 5 } })
    expect(run.status).toBe(200)
    expect(run.body).toMatchObject({ running: true, slug: "reboot-now", data: { delay: 5 }, device: { id: deviceId }, command: { id: cmd.body.id } })
    const byId = await app("POST", "/commands/run", { id: cmd.body.id })
    expect(byId.body.running).toBe(true)
    expect((await app("POST", "/commands/run", { slug: "nope", device: { id: deviceId } })).status).toBe(404)
    expect((await t.call("POST", "/commands/run", { key: deviceKey, body: { slug: "reboot-now" } })).status).toBe(403)
    const list = await app("GET", `/commands?device.id=${deviceId}`)
    expect(list.body.commands.map((c: { id: string }) => c.id)).toEqual([cmd.body.id])
    const renamed = await app("PUT", `/commands/${cmd.body.id}`, { name: "Restart", slug: "restart" })
    expect(renamed.body).toMatchObject({ name: "Restart", slug: "restart" })
    expect((await app("DELETE", `/commands/${cmd.body.id}`)).body).toEqual({ id: cmd.body.id, deleted: true })
  })
})
