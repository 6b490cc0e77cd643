import mqtt from "mqtt"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createRestClient } from "../../src/client/index.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"
import { startServerProcess } from "../support/process.ts"

/**
 * Publishes QoS 1 events as fast as the server acknowledges them, kills the server with
 * SIGKILL after `killAfter` acknowledgements, restarts it on the same store, and returns the
 * sequence numbers that were acknowledged and those that are stored.
 */
const publishThroughACrash = async (env: Record<string, string>, killAfter: number) => {
  const first = await startServerProcess(env)
  const rest = createRestClient({ baseUrl: `http://127.0.0.1:${first.port}/v1`, key: BOOTSTRAP_KEY })
  const space = await rest.spaces.create({ name: "Crash" })
  const device = await rest.devices.create({ name: "Survivor", space: { id: space.id } })
  const client = mqtt.connect(`mqtt://127.0.0.1:${first.mqttPort}`, { username: device.secretKey, password: " ", reconnectPeriod: 0 })
  await new Promise<void>((resolve, reject) => {
    client.once("connect", () => resolve())
    client.once("error", reject)
  })
  client.on("error", () => {})
  const acked: Array<number> = []
  let killed = false
  const killedAt = new Promise<void>((resolve) => {
    const inflight = new Set<Promise<void>>()
    let seq = 0
    const pump = () => {
      while (!killed && inflight.size < 50) {
        const n = seq++
        const p = client.publishAsync(`devices/${device.id}/events/seq`, JSON.stringify({ data: n }), { qos: 1 }).then(() => {
          if (killed) return
          acked.push(n)
          if (acked.length >= killAfter) {
            killed = true
            first.child.kill("SIGKILL")
            resolve()
          }
        }, () => {}).finally(() => {
          inflight.delete(p)
          pump()
        })
        inflight.add(p)
      }
    }
    pump()
  })
  await killedAt
  const ackedAtKill = [...acked]
  client.end(true)
  await new Promise((r) => first.child.once("exit", r))

  const second = await startServerProcess(env)
  try {
    const again = createRestClient({ baseUrl: `http://127.0.0.1:${second.port}/v1`, key: BOOTSTRAP_KEY })
    const stored = new Set<number>()
    for (let page = 0; ; page++) {
      const res = await again.events.list(device.id, { name: "seq", limit: 200, page })
      for (const e of res.events) stored.add(e.data as number)
      if (res.events.length < 200) break
    }
    return { acked: ackedAtKill, stored }
  } finally {
    await second.stop()
  }
}

describe("kill -9 during a QoS 1 publish stream", () => {
  let db: TestDatabase
  let dir: string
  beforeAll(async () => {
    db = await createPostgresDatabase()
    dir = await mkdtemp(join(tmpdir(), "voltaic-crash-"))
  })
  afterAll(async () => {
    await db?.drop()
    await rm(dir, { recursive: true, force: true })
  })

  it("keeps every PUBACKed event on Postgres", async () => {
    const { acked, stored } = await publishThroughACrash({ DATABASE_URL: db.url, BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY }, 1_000)
    expect(acked.length).toBeGreaterThanOrEqual(1_000)
    expect(acked.filter((n) => !stored.has(n))).toEqual([])
  }, 120_000)

  it("keeps every PUBACKed event on PGlite in DATA_DIR", async () => {
    const { acked, stored } = await publishThroughACrash({ DATA_DIR: dir, BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY }, 300)
    expect(acked.length).toBeGreaterThanOrEqual(300)
    expect(acked.filter((n) => !stored.has(n))).toEqual([])
  }, 120_000)
})
