import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, POSTGRES_ADMIN_URL, type TestDatabase } from "../support/databases.ts"
import { type MqttTestApp, startMqttApp } from "../support/mqtt.ts"

describe("an MQTT CONNECT while the store is lost", () => {
  let db: TestDatabase
  let name: string
  let admin: postgres.Sql
  let t: MqttTestApp
  beforeAll(async () => {
    db = await createPostgresDatabase()
    name = new URL(db.url).pathname.slice(1)
    admin = postgres(POSTGRES_ADMIN_URL, { max: 1, onnotice: () => {} })
    t = await startMqttApp("pglite", { env: { DATABASE_URL: db.url } })
  })
  afterAll(async () => {
    await admin?.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`)
    await t?.close()
    await admin?.end({ timeout: 1 })
    await db?.drop()
  })

  it("waits for the store to come back instead of refusing (mqtt.js stops reconnecting after a refused CONNECT)", async () => {
    const space = (await t.call("POST", "/spaces", { body: { name: "Outage" } })).body
    const device = (await t.call("POST", "/devices", { body: { name: "Patient", space: { id: space.id } } })).body
    // The database refuses new connections and its open ones are cut: the store is lost.
    await admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`)
    await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${name}`
    let settled = false
    const connecting = t.connectInMemory({ username: device.secretKey, password: " " }).finally(() => (settled = true))
    // Long enough for the credential lookup to fail a few times (a refusal came within milliseconds).
    await new Promise((r) => setTimeout(r, 300))
    expect(settled).toBe(false)
    await admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`)
    const client = await connecting
    await client.publishAsync(`devices/${device.id}/events/back`, "1", { qos: 1 })
    expect((await t.call("GET", `/events?device.id=${device.id}&name=back`)).body.count).toBe(1)
  })
})
