import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"

describe.each(STORE_KINDS)("resources on %s", (kind) => {
  let t: TestApp
  const call = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  beforeAll(async () => {
    t = await startAppOn(kind)
  })
  afterAll(() => t.close())

  it("stores and returns every field of a space with its type", async () => {
    const created = await call("POST", "/spaces", {
      name: "Head office",
      clientId: "client-7",
      isPublic: true,
      disabled: false,
      avatar: { default: "a.png", url: "https://x/a.png", thumbnail: "https://x/t.png" },
      timezone: "Europe/Dublin",
      country: "IRL"
    })
    expect(created.status).toBe(200)
    expect(created.body).toMatchObject({
      name: "Head office",
      clientId: "client-7",
      isPublic: true,
      disabled: false,
      avatar: { default: "a.png", url: "https://x/a.png", thumbnail: "https://x/t.png" },
      timezone: "Europe/Dublin",
      country: "IRL",
      owner: { organisation: { name: "Default organisation" } }
    })
    expect(created.body.id).toMatch(/^spc_/)
    expect(Number.isInteger(created.body.createdAt)).toBe(true)
    const read = await call("GET", `/spaces/${created.body.id}`)
    expect(read.body).toEqual(created.body)
    const defaults = await call("POST", "/spaces", { name: "Bare" })
    expect(defaults.body).toMatchObject({ timezone: "UTC", country: null, isPublic: false, avatar: null })
  })

  it("updates only the given fields and clears a field set to null", async () => {
    const space = (await call("POST", "/spaces", { name: "Lab", country: "FRA" })).body
    const updated = await call("PUT", `/spaces/${space.id}`, { name: "Lab 2", country: null })
    expect(updated.status).toBe(200)
    expect(updated.body).toMatchObject({ name: "Lab 2", country: null, timezone: "UTC" })
    expect(updated.body.updatedAt).toBeGreaterThanOrEqual(space.updatedAt)
  })

  it("stores every field of a device and embeds its space and product", async () => {
    const space = (await call("POST", "/spaces", { name: "Plant" })).body
    const product = (await call("POST", "/products", {
      name: "Meter X",
      description: "3-phase meter",
      manufacturer: "Acme",
      model: "MX-3",
      category: "electricity",
      image: "https://x/m.png",
      colour: "#1a2b3c",
      state: { firmware: "1.2" }
    })).body
    expect(product.id).toMatch(/^prd_/)
    const place = (await call("POST", "/places", { name: "Floor 1", space: { id: space.id }, config: { capacity: 10, squareMeters: 200 } })).body
    expect(place).toMatchObject({ name: "Floor 1", space: { id: space.id }, config: { capacity: 10, squareMeters: 200 } })
    const gateway = (await call("POST", "/gateways", {
      name: "GW",
      serialNumber: "G-1",
      product: { id: product.id },
      isOnline: true,
      lora: { gatewayId: "eui-1" }
    })).body
    expect(gateway).toMatchObject({ name: "GW", serialNumber: "G-1", product: { id: product.id }, isOnline: true, lora: { gatewayId: "eui-1" }, lastSeenAt: null })

    const body = {
      name: "Main meter",
      customId: "meter-001",
      isMain: true,
      isActive: true,
      serialNumber: "SN-9",
      batchNumber: "B-2",
      space: { id: space.id },
      product: { id: product.id },
      place: { id: place.id },
      gateway: { id: gateway.id },
      state: { relay: "on" },
      meta: { floor: 1 },
      wifi: { macAddress: "aa:bb", rssi: -50 },
      cellular: { network: "lte", rssi: -80, imei: "35", iccid: "89" },
      bluetooth: { macAddress: "cc:dd", rssi: -60 },
      lora: { devEui: "1", devAddr: "2", appEui: "3", appKey: "4" },
      sigfox: { id: "sf" }
    }
    const created = await call("POST", "/devices", body)
    expect(created.status).toBe(200)
    const { space: _s, product: _p, place: _pl, gateway: _g, ...scalars } = body
    expect(created.body).toMatchObject(scalars)
    expect(created.body.id).toMatch(/^dev_/)
    expect(created.body.space).toMatchObject({ id: space.id, name: "Plant" })
    expect(created.body.product).toMatchObject({ id: product.id, colour: "#1a2b3c", state: { firmware: "1.2" } })
    expect(created.body.place).toEqual({ id: place.id })
    expect(created.body.gateway).toEqual({ id: gateway.id })
    expect(created.body).toMatchObject({ events: [], location: null, lastSeenAt: null })

    const filters: Array<[string, string]> = [
      ["space.id", space.id],
      ["product.id", product.id],
      ["place.id", place.id],
      ["gateway.id", gateway.id]
    ]
    for (const [param, id] of filters) {
      const list = await call("GET", `/devices?${param}=${id}`)
      expect(list.body.map((d: { id: string }) => d.id), param).toEqual([created.body.id])
    }
    const org = created.body.organisation.id
    expect((await call("GET", `/devices?organisation.id=${org}`)).body.length).toBeGreaterThan(0)
    expect((await call("GET", "/devices?organisation.id=org_someone_else")).body).toEqual([])

    const dup = await call("POST", "/devices", { name: "Twin", customId: "meter-001", space: { id: space.id } })
    expect(dup.status).toBe(409)
  })

  it("refuses references to unknown ids with 404 naming them", async () => {
    const res = await call("POST", "/devices", { name: "Orphan", space: { id: "spc_missing" } })
    expect(res.status).toBe(404)
    expect(res.body.error.message).toBe("space spc_missing not found")
  })

  it("deletes and then answers 404", async () => {
    const product = (await call("POST", "/products", { name: "Temp" })).body
    expect((await call("DELETE", `/products/${product.id}`)).body).toEqual({ id: product.id, deleted: true })
    expect((await call("GET", `/products/${product.id}`)).status).toBe(404)
    expect((await call("DELETE", `/products/${product.id}`)).status).toBe(404)
  })

  it("pages through a list without repeats or gaps, in the asked order", async () => {
    const product = (await call("POST", "/products", { name: "Paged" })).body
    const made: Array<{ id: string; createdAt: number }> = []
    for (let i = 0; i < 7; i++) made.push((await call("POST", "/gateways", { name: `gw-${i}`, product: { id: product.id } })).body)
    // The asked order, createdAt, and the id after it: two made in one millisecond go by id, which
    // is random past its millisecond, so not always in the order they were made.
    const ids = made.toSorted((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1)).map((g) => g.id)
    const seen: Array<string> = []
    for (let page = 0; page < 4; page++) {
      const res = await call("GET", `/gateways?product.id=${product.id}&limit=3&page=${page}&sort=ASC&order=createdAt`)
      expect(res.body.count).toBe(7)
      expect(res.headers.get("x-total-count")).toBe("7")
      seen.push(...res.body.gateways.map((g: { id: string }) => g.id))
    }
    expect(seen).toEqual(ids)
    // The count rides on the page's rows; a page past the end, and a list with no match, still count.
    for (const [query, count] of [[`product.id=${product.id}&limit=3&page=5`, 7], ["product.id=prd_none&page=0", 0], ["product.id=prd_none&page=2", 0]] as const) {
      const res = await call("GET", `/gateways?${query}`)
      expect([res.body.gateways.length, res.body.count, res.headers.get("x-total-count")]).toEqual([0, count, String(count)])
    }
    const desc = await call("GET", `/gateways?product.id=${product.id}&limit=200&order=name&sort=desc`)
    expect(desc.body.gateways.map((g: { name: string }) => g.name)).toEqual(ids.map((_, i) => `gw-${i}`).reverse())
  })

  it("filters lists by since (inclusive) and until (exclusive)", async () => {
    const a = (await call("POST", "/places", { name: "A" })).body
    await new Promise((r) => setTimeout(r, 5))
    const b = (await call("POST", "/places", { name: "B" })).body
    const since = await call("GET", `/places?since=${b.createdAt}`)
    expect(since.body.places.map((p: { id: string }) => p.id)).toEqual([b.id])
    const until = await call("GET", `/places?until=${b.createdAt}&since=${a.createdAt}`)
    expect(until.body.places.map((p: { id: string }) => p.id)).toEqual([a.id])
    const iso = await call("GET", `/places?since=${encodeURIComponent(new Date(b.createdAt).toISOString())}`)
    expect(iso.body.places.map((p: { id: string }) => p.id)).toEqual([b.id])
  })

  it("filters spaces by country", async () => {
    const space = (await call("POST", "/spaces", { name: "Paris", country: "FRA" })).body
    const res = await call("GET", "/spaces?country=FRA")
    expect(res.body.spaces.map((s: { id: string }) => s.id)).toContain(space.id)
    expect(res.body.spaces.every((s: { country: string }) => s.country === "FRA")).toBe(true)
  })
})
