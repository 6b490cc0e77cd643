import { PGlite } from "@electric-sql/pglite"
import mqtt from "mqtt"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"

const startBroker = async (env: Record<string, string>): Promise<{ broker: ChildProcess; url: string; httpUrl: string | undefined }> => {
  const broker = spawn(process.execPath, ["--import", "tsx", "bench/aedes-bare.ts"], {
    env: { ...process.env, HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "inherit"]
  })
  const [url, httpUrl] = await new Promise<[string, string | undefined]>((resolve, reject) => {
    let out = ""
    broker.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString()
      const m = /(?:bare|durable) aedes listening on ([\d.]+):(\d+)(?:, http on ([\d.]+):(\d+))?\n/.exec(out)
      if (m !== null) resolve([`mqtt://${m[1]}:${m[2]}`, m[3] === undefined ? undefined : `http://${m[3]}:${m[4]}`])
    })
    broker.once("exit", (code) => reject(new Error(`the broker exited (${code}) before listening`)))
  })
  return { broker, url, httpUrl }
}

/** `POST /v1/commands/run` on the peer's HTTP port: its status and body. */
const postRun = async (httpUrl: string, body: string) => {
  const res = await fetch(`${httpUrl}/v1/commands/run`, { method: "POST", headers: { "content-type": "application/json" }, body })
  return { status: res.status, body: await res.text() }
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

/**
 * The command case's REST peer (`PEER_HTTP=1`): a run posted becomes a publish on its run topic;
 * on the durable peer it is answered and forwarded only once its row committed, as Voltaic's are.
 */
describe("bench/aedes-bare.ts, the REST peer", () => {
  let database: TestDatabase
  let sql: postgres.Sql

  beforeAll(async () => {
    database = await createPostgresDatabase()
    sql = postgres(database.url, { max: 2, onnotice: () => {} })
  }, 60_000)

  afterAll(async () => {
    await sql?.end({ timeout: 1 })
    await database?.drop()
  })

  it("answers and forwards a posted run only once its row is committed (durable)", async () => {
    const { broker, url, httpUrl } = await startBroker({ DURABLE_DATABASE_URL: database.url, PEER_HTTP: "1" })
    const device = await mqtt.connectAsync(url, { clientId: "rest-peer-device", reconnectPeriod: 0 })
    try {
      expect(httpUrl).toBeDefined()
      const received: Array<{ topic: string; payload: string }> = []
      device.on("message", (topic, payload) => received.push({ topic, payload: payload.toString() }))
      await device.subscribeAsync("devices/dev_r/commands/ping/run", { qos: 1 })

      const held = await sql.reserve()
      await held.unsafe("BEGIN")
      await held.unsafe("LOCK TABLE peer_messages IN ACCESS EXCLUSIVE MODE")
      let answered: { status: number; body: string } | undefined
      const posted = postRun(httpUrl!, JSON.stringify({ slug: "ping", device: { id: "dev_r" }, data: { run: "r1" } })).then((a) => (answered = a))
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(answered).toBeUndefined()
      expect(received).toEqual([])

      await held.unsafe("COMMIT")
      held.release()
      await posted
      expect(answered?.status).toBe(200)
      const run = JSON.parse(answered!.body) as { slug: string; data: unknown; device: { id: string } }
      expect(run).toMatchObject({ slug: "ping", data: { run: "r1" }, device: { id: "dev_r" } })
      const rows = await sql<Array<{ topic: string; payload: string; client_id: string }>>`SELECT topic, payload, client_id FROM peer_messages WHERE client_id = 'http'`
      expect(rows).toEqual([{ topic: "devices/dev_r/commands/ping/run", payload: answered!.body, client_id: "http" }])
      await expect.poll(() => received.length).toBe(1)
      expect(received[0]).toEqual({ topic: "devices/dev_r/commands/ping/run", payload: answered!.body })
    } finally {
      await device.endAsync()
      broker.kill("SIGTERM")
    }
  }, 30_000)

  it("forwards a posted run at once without a store, and refuses a body it cannot read", async () => {
    const { broker, url, httpUrl } = await startBroker({ PEER_HTTP: "1" })
    const device = await mqtt.connectAsync(url, { clientId: "rest-peer-bare", reconnectPeriod: 0 })
    try {
      const received: Array<string> = []
      device.on("message", (_topic, payload) => received.push(payload.toString()))
      await device.subscribeAsync("devices/dev_b/commands/+/run", { qos: 1 })
      expect((await postRun(httpUrl!, "{not json")).status).toBe(400)
      expect((await postRun(httpUrl!, JSON.stringify({ device: { id: "dev_b" } }))).status).toBe(400)
      const ok = await postRun(httpUrl!, JSON.stringify({ slug: "ping", device: { id: "dev_b" }, data: { run: "r2" } }))
      expect(ok.status).toBe(200)
      await expect.poll(() => received.length).toBe(1)
      expect(JSON.parse(received[0])).toMatchObject({ slug: "ping", data: { run: "r2" }, device: { id: "dev_b" } })
    } finally {
      await device.endAsync()
      broker.kill("SIGTERM")
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
