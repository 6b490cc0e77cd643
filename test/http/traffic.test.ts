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

  it("stores an event's data with dotted keys as sent, as MQTT does, while the body's own dotted keys are fields", async () => {
    const data = { "temp.c": 21.5, probe: { "a.b": [1, { "c.d": true }] }, "device.id": "not a field here" }
    const res = await app("POST", "/events", { name: "climate", data, "device.id": deviceId })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ data, device: { id: deviceId } })
    expect((await app("GET", `/events/${res.body.id}`)).body.data).toEqual(data)
    // A top-level dotted key into data is still the nested field it names.
    const merged = await app("POST", "/events", { name: "climate", data: { a: 1 }, "data.b": 2, device: { id: deviceId } })
    expect(merged.body.data).toEqual({ a: 1, b: 2 })
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

  it("creates a command for a device named by its customId, and creates no device for an unknown one", async () => {
    const space = (await app("POST", "/spaces", { name: "Pump house" })).body
    const device = (await app("POST", "/devices", { name: "Pump", customId: "pump-3", space: { id: space.id } })).body
    const cmd = await app("POST", "/commands", { name: "Prime", device: { customId: "pump-3" } })
    expect(cmd.status).toBe(200)
    expect(cmd.body).toMatchObject({ slug: "prime", device: { id: device.id } })
    expect((await app("POST", "/commands", { name: "Flush", "device.customId": "pump-3", "device.id": device.id })).body.device.id).toBe(device.id)
    const mismatch = await app("POST", "/commands", { name: "Drain", device: { id: deviceId, customId: "pump-3" } })
    expect(mismatch.status).toBe(400)
    expect(mismatch.body.error.field).toBe("device.customId")
    const unknown = await app("POST", "/commands", { name: "Prime", device: { customId: "no-such-pump" } })
    expect(unknown.status).toBe(404)
    expect((await app("GET", "/devices?search=no-such-pump")).body).toEqual([])
    expect((await app("POST", "/commands/run", { slug: "prime", device: { customId: "pump-3" } })).body).toMatchObject({ running: true, command: { id: cmd.body.id } })
  })
})

describe.each(STORE_KINDS)("refusals of device traffic over REST on %s", (kind) => {
  let t: TestApp
  let deviceId: string
  let deviceKey: string
  let otherKey: string
  let otherDeviceId: string
  const app = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  const form = (path: string, fields: Record<string, string>, key = BOOTSTRAP_KEY) =>
    t.call("POST", path, {
      key,
      body: new URLSearchParams(fields).toString(),
      headers: { "content-type": "application/x-www-form-urlencoded" }
    })
  const customIds = async () =>
    ((await app("GET", "/devices?limit=200")).body as Array<{ customId: string | null }>).map((d) => d.customId).filter((c) => c !== null)

  beforeAll(async () => {
    t = await startAppOn(kind)
    const space = await app("POST", "/spaces", { name: "Site" })
    const device = await app("POST", "/devices", { name: "Sensor", customId: "sensor-1", space: { id: space.body.id } })
    deviceId = device.body.id
    deviceKey = device.body.secretKey
    const other = await app("POST", "/organisations", {
      name: "Other",
      owner: { emailAddress: "other@example.com", fullName: "Other Owner", password: "other password" }
    })
    otherKey = other.body.apiKey.secretKey
    const otherSpace = await t.call("POST", "/spaces", { key: otherKey, body: { name: "Theirs" } })
    otherDeviceId = (await t.call("POST", "/devices", { key: otherKey, body: { name: "Theirs", space: { id: otherSpace.body.id } } })).body.id
  })
  afterAll(() => t.close())

  it("refuses dotted keys that would reach Object.prototype (the payload policy), and goes on serving", async () => {
    const res = await form("/events", { name: "x", "device.id": deviceId, "__proto__.polluted": "yes", "constructor.prototype.polluted": "yes" })
    expect(res.status).toBe(400)
    expect(res.body.error.field).toBe("__proto__.polluted")
    const json = await app("POST", "/events", { name: "x", device: { id: deviceId }, "__proto__.polluted": "yes" })
    expect(json.status).toBe(400)
    expect(Object.prototype).not.toHaveProperty("polluted")
    expect((await app("POST", "/events", { name: "after", device: { id: deviceId } })).status).toBe(200)
  })

  it("creates no device for a new customId when the event, reading or run is refused", async () => {
    const refused: Array<[string, unknown, number]> = [
      ["/events", { name: "blob", data: "x".repeat(300 * 1024), device: { customId: "new-413" } }, 413],
      ["/events", { name: "electricity", data: "abc", device: { customId: "new-energy" } }, 400],
      ["/events", { name: "x", timestamp: "2026-02-30T00:00:00Z", device: { customId: "new-time" } }, 400],
      ["/commands/run", { slug: "go", device: { customId: "new-run" } }, 404]
    ]
    for (const [path, body, status] of refused) expect((await app("POST", path, body)).status, JSON.stringify(body).slice(0, 80)).toBe(status)
    expect(await customIds()).toEqual(["sensor-1"])
  })

  it("counts the data limit in UTF-8 bytes", async () => {
    // 100 K three-byte characters: 300 KB of JSON in 100 K characters.
    const res = await app("POST", "/events", { name: "euro", data: "€".repeat(100 * 1024), device: { id: deviceId } })
    expect(res.status).toBe(413)
  })

  it("answers 404 for the history of an unknown device or one of another organisation", async () => {
    for (const path of ["/events", "/locations", "/commands"]) {
      for (const id of ["dev_nope", otherDeviceId]) {
        const res = await app("GET", `${path}?device.id=${id}`)
        expect(res.status, `${path} ${id}`).toBe(404)
        expect(res.body.error.code).toBe("not_found")
      }
    }
  })

  it("takes epoch milliseconds as digits, refuses dates that do not exist, and says what it takes", async () => {
    const digits = await form("/events", { name: "t", "device.id": deviceId, timestamp: "1700000000000" })
    expect(digits.status).toBe(200)
    expect(digits.body.timestamp).toBe(1_700_000_000_000)
    const iso = await app("POST", "/events", { name: "t", timestamp: "2026-03-01T12:00:00Z", device: { id: deviceId } })
    expect(iso.body.timestamp).toBe(Date.UTC(2026, 2, 1, 12))
    for (const timestamp of ["2026-02-30T00:00:00Z", "2026-01-01T24:30:00Z", "soon", -1, 1.5, true]) {
      const res = await app("POST", "/events", { name: "t", timestamp, device: { id: deviceId } })
      expect(res.status, String(timestamp)).toBe(400)
      expect(res.body.error.message).toMatch(/^timestamp: must be epoch milliseconds or an ISO-8601 date-time/)
    }
    expect((await app("GET", `/events?device.id=${deviceId}&since=2026-02-30`)).status).toBe(400)
  })

  it("refuses a device naming another device by customId, and an application naming one device two ways", async () => {
    const own = await t.call("POST", "/events", { key: deviceKey, body: { name: "x", device: { customId: "sensor-1" } } })
    expect(own.status).toBe(200)
    const other = await t.call("POST", "/events", { key: deviceKey, body: { name: "x", device: { customId: "someone-else" } } })
    expect(other.status).toBe(403)
    const mismatch = await app("POST", "/events", { name: "x", device: { id: deviceId, customId: "someone-else" } })
    expect(mismatch.status).toBe(400)
    expect(mismatch.body.error.field).toBe("device.customId")
    const agree = await app("POST", "/events", { name: "x", device: { id: deviceId, customId: "sensor-1" } })
    expect(agree.body.device.id).toBe(deviceId)
    expect(await customIds()).toEqual(["sensor-1"])
  })

  it("checks a run by id against the slug and device given with it", async () => {
    const cmd = await app("POST", "/commands", { name: "Open", device: { id: deviceId } })
    const second = await app("POST", "/devices", { name: "Second", space: { id: (await app("GET", `/devices/${deviceId}`)).body.space.id } })
    const wrongSlug = await app("POST", "/commands/run", { id: cmd.body.id, slug: "close" })
    expect(wrongSlug.status).toBe(400)
    expect(wrongSlug.body.error.field).toBe("slug")
    const wrongDevice = await app("POST", "/commands/run", { id: cmd.body.id, device: { id: second.body.id } })
    expect(wrongDevice.status).toBe(400)
    expect(wrongDevice.body.error.field).toBe("device")
    const byCustomId = await app("POST", "/commands/run", { slug: "open", device: { customId: "sensor-1" } })
    expect(byCustomId.body).toMatchObject({ running: true, device: { id: deviceId } })
    const formRun = await form("/commands/run", { slug: "open", "device.id": deviceId, data: "{\"percent\":40}" })
    expect(formRun.body.data).toEqual({ percent: 40 })
  })

  it("names the field of a unique conflict, not the constraint", async () => {
    await app("POST", "/commands", { name: "A", device: { id: deviceId } })
    const b = await app("POST", "/commands", { name: "B", device: { id: deviceId } })
    const res = await app("PUT", `/commands/${b.body.id}`, { slug: "a" })
    expect(res.status).toBe(409)
    expect(res.body.error.message).toBe(`slug: must be unique per device; another command has "a"`)
    const device = await app("POST", "/devices", { name: "Dup", customId: "sensor-1", space: { id: (await app("GET", `/devices/${deviceId}`)).body.space.id } })
    expect(device.status).toBe(409)
    expect(device.body.error.message).toMatch(/^customId: must be unique in the organisation/)
  })
})
