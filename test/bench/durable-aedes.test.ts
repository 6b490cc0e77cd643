import { PGlite } from "@electric-sql/pglite"
import mqtt from "mqtt"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"

const startBroker = async (env: Record<string, string>): Promise<{ broker: ChildProcess; url: string }> => {
  const broker = spawn(process.execPath, ["--import", "tsx", "bench/aedes-bare.ts"], {
    env: { ...process.env, HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "inherit"]
  })
  const url = await new Promise<string>((resolve, reject) => {
    let out = ""
    broker.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString()
      const m = /durable aedes listening on ([\d.]+):(\d+)/.exec(out)
      if (m !== null) resolve(`mqtt://${m[1]}:${m[2]}`)
    })
    broker.once("exit", (code) => reject(new Error(`the broker exited (${code}) before listening`)))
  })
  return { broker, url }
}

/**
 * bench:ingest's durable peer (bench/aedes-bare.ts with DURABLE_DATABASE_URL) is what Voltaic's
 * publish → subscriber and command latencies are compared with: if it forwarded or acknowledged
 * before its commit it would be the bare broker again under another name.
 */
describe("bench/aedes-bare.ts, durable", () => {
  let database: TestDatabase
  let sql: postgres.Sql
  let broker: ChildProcess
  let url: string

  beforeAll(async () => {
    database = await createPostgresDatabase()
    sql = postgres(database.url, { max: 2, onnotice: () => {} })
    ;({ broker, url } = await startBroker({ DURABLE_DATABASE_URL: database.url }))
  }, 60_000)

  afterAll(async () => {
    broker?.kill("SIGTERM")
    await sql?.end({ timeout: 1 })
    await database?.drop()
  })

  it("acknowledges and forwards a publish only once its row is committed, and each publish once", async () => {
    const subscriber = await mqtt.connectAsync(url, { clientId: "durable-sub", reconnectPeriod: 0 })
    const publisher = await mqtt.connectAsync(url, { clientId: "durable-pub", reconnectPeriod: 0 })
    try {
      const received: Array<string> = []
      subscriber.on("message", (_topic, payload) => received.push(payload.toString()))
      await subscriber.subscribeAsync("devices/+/events/+", { qos: 0 })

      // The table held by another transaction: the peer's insert waits for it.
      const held = await sql.reserve()
      await held.unsafe("BEGIN")
      await held.unsafe("LOCK TABLE peer_messages IN ACCESS EXCLUSIVE MODE")
      let acked = 0
      const publishes = ["a", "b", "c"].map((n) =>
        publisher.publishAsync(`devices/dev_1/events/${n}`, JSON.stringify({ n }), { qos: 1 }).then(() => void acked++)
      )
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(acked).toBe(0)
      expect(received).toEqual([])

      await held.unsafe("COMMIT")
      held.release()
      await Promise.all(publishes)
      const rows = await sql<Array<{ topic: string; payload: string; client_id: string }>>`SELECT topic, payload, client_id FROM peer_messages ORDER BY id`
      expect(rows).toEqual(["a", "b", "c"].map((n) => ({ topic: `devices/dev_1/events/${n}`, payload: JSON.stringify({ n }), client_id: "durable-pub" })))
      await expect.poll(() => received.length).toBe(3)
      expect(received).toEqual(["a", "b", "c"].map((n) => JSON.stringify({ n })))
    } finally {
      await publisher.endAsync()
      await subscriber.endAsync()
    }
  }, 30_000)
})

describe("bench/aedes-bare.ts, durable on PGlite", () => {
  const dir = mkdtempSync(join(tmpdir(), "voltaic-durable-aedes-"))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  it("keeps each acknowledged publish in its data directory, quotes and backslashes as sent", async () => {
    const { broker, url } = await startBroker({ DURABLE_PGLITE_DIR: dir })
    const exited = new Promise((resolve) => broker.once("exit", resolve))
    const payloads = [JSON.stringify({ n: 1 }), 'say "hi"', "a\\b", "{x,y}"]
    const publisher = await mqtt.connectAsync(url, { clientId: "durable-pglite", reconnectPeriod: 0 })
    try {
      for (const p of payloads) await publisher.publishAsync("devices/dev_2/events/e", p, { qos: 1 })
    } finally {
      await publisher.endAsync()
      broker.kill("SIGTERM")
      await exited
    }
    const db = await PGlite.create(dir)
    try {
      const { rows } = await db.query<{ topic: string; payload: string; client_id: string }>("SELECT topic, payload, client_id FROM peer_messages ORDER BY id")
      expect(rows).toEqual(payloads.map((payload) => ({ topic: "devices/dev_2/events/e", payload, client_id: "durable-pglite" })))
    } finally {
      await db.close()
    }
  }, 60_000)
})
