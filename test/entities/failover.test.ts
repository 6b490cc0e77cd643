import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"
import { eventually, until } from "../support/eventually.ts"
import { type ServerProcess, startServerProcess } from "../support/process.ts"

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"
/**
 * The slowest handover is the lock expiry (6 s after the killed runner's last refresh, at most 2 s
 * before the kill) when the killed runner ran the health check, then a second for the new shard
 * assignments and one for the deadline sweep: about 8.5 s after the last event (measured: an alert
 * 4.0 s after its deadline with afterSeconds 5, 7.7 s after the kill), within 6 + 5 with a margin.
 */
const AFTER_S = 6
const DEVICES = 24

/** Backends of the cluster's pools that hold shard locks (SqlRunnerStorage: one advisory lock per shard), in this database: pg_locks lists every database's. */
const SHARD_HOLDERS = `SELECT count(DISTINCT pid)::int AS holders, count(*)::int AS shards FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND objsubid = 2
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid::bigint BETWEEN 1000001 AND 1000300`

/**
 * Two server processes on one Postgres and NATS; the one killed with SIGKILL owned some of the
 * devices that had just fallen silent: only their rows' deadlines are left, swept by the survivor (`OverdueDevices`).
 */
describe("kill -9 of the owner of silent devices", () => {
  let db: TestDatabase
  let admin: postgres.Sql
  let a: ServerProcess
  let b: ServerProcess
  beforeAll(async () => {
    db = await createPostgresDatabase()
    admin = postgres(db.url, { max: 1, onnotice: () => {} })
    const env = { DATABASE_URL: db.url, NATS_URL, BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY }
    ;[a, b] = await Promise.all([startServerProcess(env), startServerProcess(env)])
  }, 90_000)
  afterAll(async () => {
    await Promise.all([a?.stop("SIGKILL"), b?.stop()])
    await admin?.end({ timeout: 1 })
    await db?.drop()
  })

  it("gives each device exactly one offline alert, from the survivor, within afterSeconds + 5 s", async () => {
    const rest = async (method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => {
      const res = await fetch(`http://127.0.0.1:${b.port}/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body)
      })
      expect(res.status, `${method} ${path}`).toBe(200)
      return res.json()
    }
    const space = await rest("POST", "/spaces", { name: "Failover" })
    const rule = await rest("POST", "/alertRules", {
      name: "Silent",
      type: "offline",
      severity: "high",
      space: { id: space.id },
      config: { afterSeconds: AFTER_S }
    })
    const devices: Array<{ id: string; secretKey: string }> = []
    for (let i = 0; i < DEVICES; i++) devices.push(await rest("POST", "/devices", { name: `d${i}`, space: { id: space.id } }))
    // Both processes own shards.
    await until(async () => (await admin.unsafe(SHARD_HOLDERS))[0].holders === 2, 20_000, "shards split between the two runners")

    const seen = new Map<string, number>()
    for (const device of devices) seen.set(device.id, (await rest("POST", "/events", { name: "last" }, device.secretKey)).timestamp)
    // Every owner holds its device (asked through B: the live fields come from the owner, wherever it is).
    await until(async () => {
      const live = await Promise.all(devices.map(async (d) => (await rest("GET", `/devices/${d.id}`)).live))
      return live.every((l) => l.isOnline)
    }, 5_000, "every device online at its owner")

    await a.stop("SIGKILL")
    const killedAt = Date.now()
    const { value: alerts } = await eventually(async () => {
      const list = await rest("GET", `/alerts?alertRule.id=${rule.id}&limit=200`) as Array<{ device: { id: string }; firstSeenAt: number; createdAt: number }>
      return list.length >= DEVICES ? list : undefined
    }, AFTER_S * 1000 + 15_000, "an offline alert for every device")
    for (const alert of alerts) {
      const last = seen.get(alert.device.id)!
      expect(alert.firstSeenAt).toBe(last + AFTER_S * 1000)
      expect(alert.createdAt).toBeGreaterThan(killedAt)
      expect(alert.createdAt - last).toBeLessThanOrEqual(AFTER_S * 1000 + 5_000)
    }
    expect(new Set(alerts.map((x) => x.device.id)).size).toBe(DEVICES)
    const late = alerts.map((x) => x.createdAt - seen.get(x.device.id)! - AFTER_S * 1000)
    console.log(`failover: offline alerts ${Math.min(...late)}–${Math.max(...late)} ms after their deadlines; last one ${Math.max(...alerts.map((x) => x.createdAt)) - killedAt} ms after the kill`)
    // The survivor owns every shard; nothing more is raised.
    expect((await admin.unsafe(SHARD_HOLDERS))[0]).toEqual({ holders: 1, shards: 300 })
    await new Promise((r) => setTimeout(r, AFTER_S * 1000))
    expect(await rest("GET", `/alerts?alertRule.id=${rule.id}&limit=200`)).toHaveLength(DEVICES)
  }, 90_000)
})
