import { Context } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { bucketOf } from "../../src/entities/protocol.ts"
import { ResidentBuckets } from "../../src/entities/residents.ts"
import { BOOTSTRAP_KEY, startApp, type TestApp } from "../support/app.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"
import { eventually } from "../support/eventually.ts"

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"
const AFTER_S = 2

/** Two processes of one cluster (each serving REST and the runner endpoint on its own port), one Postgres, one NATS. */
describe("a device that publishes to two processes in turn", () => {
  let db: TestDatabase
  let a: TestApp
  let b: TestApp
  beforeAll(async () => {
    db = await createPostgresDatabase()
    a = await startApp({ DATABASE_URL: db.url, NATS_URL }, { listen: true })
    b = await startApp({ DATABASE_URL: db.url, NATS_URL }, { listen: true })
  }, 60_000)
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await db?.drop()
  })

  const residentIn = (app: TestApp, bucket: string) => Context.getUnsafe(app.context, ResidentBuckets).list().includes(bucket)

  it("has one owner, gets no offline alert while it is active, and exactly one once it falls silent", async () => {
    const call = (app: TestApp, method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => app.call(method, path, { key, body })
    const space = (await call(a, "POST", "/spaces", { name: "Two runners" })).body
    const device = (await call(a, "POST", "/devices", { name: "Roaming", space: { id: space.id } })).body
    const rule = (await call(b, "POST", "/alertRules", {
      name: "Silent",
      type: "offline",
      severity: "high",
      space: { id: space.id },
      config: { afterSeconds: AFTER_S }
    })).body
    const alerts = async () => (await call(a, "GET", `/alerts?alertRule.id=${rule.id}`)).body as Array<{ device: { id: string }; firstSeenAt: number }>

    // Every 300 ms, to A and B in turn, for three times afterSeconds.
    let last = 0
    for (let i = 0; i < 20; i++) {
      const started = Date.now()
      const res = await call(i % 2 === 0 ? a : b, "POST", "/events", { name: "tick", data: { i } }, device.secretKey)
      expect(res.status).toBe(200)
      last = res.body.timestamp
      await new Promise((r) => setTimeout(r, Math.max(0, 300 - (Date.now() - started))))
    }
    expect(await alerts()).toEqual([])

    // One owner: its bucket is resident in exactly one process, and both read the same live fields from it.
    const bucket = bucketOf(device.id)
    expect([residentIn(a, bucket), residentIn(b, bucket)].filter(Boolean)).toHaveLength(1)
    const [fromA, fromB] = await Promise.all([call(a, "GET", `/devices/${device.id}`), call(b, "GET", `/devices/${device.id}`)])
    expect(fromA.body.live).toEqual(fromB.body.live)
    expect(fromA.body.live).toMatchObject({ isOnline: true, state: "online" })
    expect(fromA.body.live.lastSeenAt).toBeGreaterThanOrEqual(last)

    // Silent now: one offline alert, at afterSeconds after its last event.
    const { value: [alert] } = await eventually(async () => {
      const list = await alerts()
      return list.length > 0 ? list : undefined
    }, AFTER_S * 1000 + 5_000, "the offline alert")
    expect(alert.device.id).toBe(device.id)
    expect(alert.firstSeenAt).toBe(fromA.body.live.lastSeenAt + AFTER_S * 1000)
    await new Promise((r) => setTimeout(r, AFTER_S * 1000 + 1_000))
    expect(await alerts()).toHaveLength(1)
    expect((await call(b, "GET", `/devices/${device.id}`)).body.live).toMatchObject({ isOnline: false, state: "offline" })
  }, 60_000)
})
