import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { coapAgent, coapCall, type CoapTestApp, startCoapApp } from "../support/coap.ts"
import { createPostgresDatabase, POSTGRES_ADMIN_URL, type TestDatabase } from "../support/databases.ts"

describe("REST and CoAP while the store is lost", () => {
  let db: TestDatabase
  let name: string
  let admin: postgres.Sql
  let t: CoapTestApp
  const agent = coapAgent()
  beforeAll(async () => {
    db = await createPostgresDatabase()
    name = new URL(db.url).pathname.slice(1)
    admin = postgres(POSTGRES_ADMIN_URL, { max: 1, onnotice: () => {} })
    t = await startCoapApp({ DATABASE_URL: db.url })
  })
  afterAll(async () => {
    await admin?.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`)
    await t?.close()
    await admin?.end({ timeout: 1 })
    await db?.drop()
  })

  it("answers 503 and 5.03 with a retry hint, logs no request as a defect, and answers again once the store is back", async () => {
    const space = (await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Outage" } })).body
    const device = (await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Meter", space: { id: space.id } } })).body
    const event = () => coapCall(agent, t.coapPort, { path: "/events", payload: JSON.stringify({ accessToken: device.secretKey, name: "t", data: 1 }) })
    const errors = vi.spyOn(console, "error")
    try {
      await admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`)
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${name}`
      for (let i = 0; i < 3; i++) {
        const res = await t.call("GET", `/devices/${device.id}`, { key: BOOTSTRAP_KEY })
        expect(res.status).toBe(503)
        expect(res.headers.get("retry-after")).toBe("1")
        expect(res.body.error).toEqual({ status: 503, code: "unavailable", message: "the store is not reachable; retry shortly" })
        expect((await event()).code).toBe("5.03")
      }
      expect(errors).not.toHaveBeenCalled()
    } finally {
      errors.mockRestore()
      await admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`)
    }
    expect((await t.call("GET", `/devices/${device.id}`, { key: BOOTSTRAP_KEY })).status).toBe(200)
    expect((await event()).code).toBe("2.01")
  })
})
