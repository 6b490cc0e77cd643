import { Hono } from "hono"
import { routePath } from "hono/route"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { StaticFirstRouter } from "../../src/adapters/http/staticFirstRouter.ts"
import { scrape } from "../../src/metrics.ts"
import { BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { sample } from "../support/metrics.ts"

/** An app with a static route beside a parameter of the same method, as the interface has. */
const clashing = (router?: StaticFirstRouter<never>) => {
  const seen: Array<string> = []
  const app = router === undefined ? new Hono() : new Hono({ router })
  app.use(async (c, next) => {
    seen.push(`before ${c.req.path}`)
    await next()
    seen.push(`after ${c.req.path}`)
  })
  app.use("/v1/*", async (c, next) => {
    seen.push("v1")
    await next()
  })
  const v1 = new Hono()
  v1.get("/devices/me", (c) => c.json({ route: routePath(c, -1), me: true }))
  v1.get("/devices/:id", (c) => c.json({ route: routePath(c, -1), id: c.req.param("id") }))
  v1.post("/devices/:id", (c) => c.json({ route: routePath(c, -1), posted: c.req.param("id") }))
  v1.get("/devices/:id/secretKey", (c) => c.json({ route: routePath(c, -1), secretOf: c.req.param("id") }))
  v1.get("/organisations/users", (c) => c.json({ route: routePath(c, -1), users: true }))
  v1.get("/organisations/:organisationUserId", (c) => c.json({ route: routePath(c, -1), user: c.req.param("organisationUserId") }))
  app.route("/v1", v1)
  app.get("/assets/*", (c) => c.json({ route: routePath(c, -1), asset: c.req.path }))
  app.notFound((c) => c.json({ missing: c.req.path }, 404))
  return { app, seen }
}

const get = async (app: Hono, path: string, method = "GET") => {
  const res = await app.request(path, { method })
  const text = await res.text()
  return { status: res.status, body: text === "" ? undefined : JSON.parse(text) }
}

describe("StaticFirstRouter", () => {
  it("is needed: over such a clash Hono's default router gives up its RegExpRouter for the whole app, and labels the static route with the parameter's", async () => {
    const { app } = clashing()
    // Both routes match /devices/me; the static one answers, the last one names the route (metrics, logs).
    expect((await get(app, "/v1/devices/me")).body).toEqual({ route: "/v1/devices/:id", me: true })
    expect(app.router.name).toBe("SmartRouter + TrieRouter")
  })

  it("answers a static route by its text and a parameter route by its pattern, middleware first, in order", async () => {
    const { app, seen } = clashing(new StaticFirstRouter())
    expect(app.router.name).toBe("StaticFirstRouter")
    expect(await get(app, "/v1/devices/me")).toEqual({ status: 200, body: { route: "/v1/devices/me", me: true } })
    expect(seen).toEqual(["before /v1/devices/me", "v1", "after /v1/devices/me"])
    seen.length = 0
    expect(await get(app, "/v1/devices/dev_1")).toEqual({ status: 200, body: { route: "/v1/devices/:id", id: "dev_1" } })
    expect(seen).toEqual(["before /v1/devices/dev_1", "v1", "after /v1/devices/dev_1"])
    expect((await get(app, "/v1/devices/dev_1/secretKey")).body).toEqual({ route: "/v1/devices/:id/secretKey", secretOf: "dev_1" })
    expect((await get(app, "/v1/organisations/users")).body).toEqual({ route: "/v1/organisations/users", users: true })
    expect((await get(app, "/v1/organisations/ou_1")).body).toEqual({ route: "/v1/organisations/:organisationUserId", user: "ou_1" })
    // A wildcard route, and a path no route takes.
    expect((await get(app, "/assets/app.js")).body).toEqual({ route: "/assets/*", asset: "/assets/app.js" })
    expect(await get(app, "/v1/devices")).toEqual({ status: 404, body: { missing: "/v1/devices" } })
  })

  it("takes the method into account: a static path under another method goes to the parameter routes", async () => {
    const { app } = clashing(new StaticFirstRouter())
    // No POST /devices/me: the parameter route of that method takes it, as the TrieRouter did.
    expect((await get(app, "/v1/devices/me", "POST")).body).toEqual({ route: "/v1/devices/:id", posted: "me" })
    // HEAD is answered by the GET routes, without a body.
    expect(await get(app, "/v1/devices/me", "HEAD")).toEqual({ status: 200, body: undefined })
    expect((await get(app, "/v1/organisations/users", "DELETE")).status).toBe(404)
  })
})

const ME = `voltaic_http_request_duration_seconds_count{method="GET",route="/v1/devices/me",status="200"}`
const BY_ID = `voltaic_http_request_duration_seconds_count{method="GET",route="/v1/devices/:id",status="200"}`
/** A counter of this process's metrics (0 before its first count). */
const count = (series: string) => sample(scrape(), series) ?? 0

describe("the REST interface's router", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  it("takes every route of the interface without falling back, and tells /devices/me from a device", async () => {
    expect(t.app.router.name).toBe("StaticFirstRouter")
    const space = (await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Home" } })).body.id
    const device = (await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "meter", space: { id: space } } })).body
    const before = [count(ME), count(BY_ID)]
    const me = await t.call("GET", "/devices/me", { key: device.secretKey })
    expect(me.status).toBe(200)
    expect(me.body.id).toBe(device.id)
    // Counted under its own route, not the parameter's (what the TrieRouter's last match said).
    expect([count(ME), count(BY_ID)]).toEqual([before[0] + 1, before[1]])
    const byId = await t.call("GET", `/devices/${device.id}`, { key: BOOTSTRAP_KEY })
    expect(byId.status).toBe(200)
    expect(byId.body.name).toBe("meter")
    expect([count(ME), count(BY_ID)]).toEqual([before[0] + 1, before[1] + 1])
    const users = await t.call("GET", "/organisations/users", { key: BOOTSTRAP_KEY })
    expect(users.status).toBe(200)
    expect(Array.isArray(users.body)).toBe(true)
    expect((await t.call("GET", "/organisations/ou_unknown", { key: BOOTSTRAP_KEY })).status).toBe(404)
    // A path served under other methods only: 405 with what is allowed.
    const refused = await t.call("PATCH", "/organisations/users", { key: BOOTSTRAP_KEY, body: {} })
    expect(refused.status).toBe(405)
    expect(refused.headers.get("allow")?.split(", ")).toContain("GET")
  })
})
