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

  it("throws a VoltaicError carrying status, code and field", async () => {
    const app = createRestClient({ baseUrl: "http://voltaic.test/v1", key: BOOTSTRAP_KEY, fetch: fetchVia(t.app) })
    const error = await app.devices.list({ limit: 0 }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(VoltaicError)
    expect(error).toMatchObject({ status: 400, code: "invalid_request", field: "limit" })
    const missing = await app.devices.get("dev_none").catch((e: unknown) => e)
    expect(missing).toMatchObject({ status: 404, code: "not_found" })
  })
})
