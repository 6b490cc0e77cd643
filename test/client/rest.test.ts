import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createRestClient, VoltaicError } from "../../src/client/index.ts"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"

describe("the REST client", () => {
  let t: TestApp
  // The client speaks fetch; the test app answers it without a socket.
  const fetchVia = (app: TestApp["app"]): typeof fetch => (input, init) => Promise.resolve(app.request(input instanceof Request ? input : String(input), init))
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  it("creates a space and a device, publishes as the device and reads the events back", async () => {
    const app = createRestClient({ baseUrl: "http://voltaic.test/v1", key: BOOTSTRAP_KEY, fetch: fetchVia(t.app) })
    const space = await app.spaces.create({ name: "Plant", timezone: "Europe/Dublin" })
    const device = await app.devices.create({ name: "Meter", space: { id: space.id } })
    expect(device.secretKey).toMatch(/^d_sk_/)

    const meter = createRestClient({ baseUrl: "http://voltaic.test/v1", key: device.secretKey, fetch: fetchVia(t.app) })
    expect((await meter.devices.me()).id).toBe(device.id)
    const event = await meter.events.publish({ name: "electricity", data: { value: 1.5 } })
    expect(event.device.id).toBe(device.id)

    const page = await app.events.list(device.id, { name: "electricity" })
    expect(page.events.map((e) => e.id)).toEqual([event.id])
    expect((await app.devices.list({ spaceId: space.id })).map((d) => d.id)).toEqual([device.id])

    await app.commands.create({ name: "Reboot", device: { id: device.id } })
    const run = await app.commands.run({ slug: "reboot", device: { id: device.id } })
    expect(run.running).toBe(true)
  })

  it("attaches a file to an event and downloads it; reads locations and manages commands", async () => {
    const app = createRestClient({ baseUrl: "http://voltaic.test/v1", key: BOOTSTRAP_KEY, fetch: fetchVia(t.app) })
    const space = await app.spaces.create({ name: "Files" })
    const device = await app.devices.create({ name: "Camera", space: { id: space.id } })
    const bytes = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 255])
    const event = await app.events.publish(
      { name: "snapshot", data: { frame: 7 }, device: { id: device.id } },
      { bytes, contentType: "image/png", filename: "frame-7.png" }
    )
    expect(event).toMatchObject({ name: "snapshot", data: { frame: 7 }, file: { filename: "frame-7.png", contentType: "image/png", size: 6 } })
    const file = await app.events.file(event.id)
    expect(file).toEqual({ bytes, contentType: "image/png", filename: "frame-7.png" })
    const plain = await app.events.publish({ name: "plain", device: { id: device.id } })
    await expect(app.events.file(plain.id)).rejects.toMatchObject({ status: 404 })

    const location = await app.locations.publish({ latitude: 1.5, longitude: 2, device: { id: device.id } })
    expect(await app.locations.get(location.id)).toEqual(location)

    const command = await app.commands.create({ name: "Capture", device: { id: device.id } })
    expect(await app.commands.get(command.id)).toEqual(command)
    expect(await app.commands.update(command.id, { slug: "snap" })).toMatchObject({ id: command.id, slug: "snap" })
    expect(await app.commands.delete(command.id)).toEqual({ id: command.id, deleted: true })
    await expect(app.commands.get(command.id)).rejects.toMatchObject({ status: 404, code: "not_found" })
  })

  it("throws a VoltaicError carrying status, code and field", async () => {
    const app = createRestClient({ baseUrl: "http://voltaic.test/v1", key: BOOTSTRAP_KEY, fetch: fetchVia(t.app) })
    const error = await app.devices.list({ limit: 0 }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(VoltaicError)
    expect(error).toMatchObject({ status: 400, code: "invalid_request", field: "limit" })
    const missing = await app.devices.get("dev_none").catch((e: unknown) => e)
    expect(missing).toMatchObject({ status: 404, code: "not_found" })
  })
})
