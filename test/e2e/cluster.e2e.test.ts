import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connectStream, createRestClient, type StreamClient } from "../../src/client/index.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"
import { type ServerProcess, startServerProcess } from "../support/process.ts"

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

const next = <T>(register: (h: (v: T) => void) => unknown, what: string) =>
  new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${what} within 5 s`)), 5_000)
    register((v) => {
      clearTimeout(timer)
      resolve(v)
    })
  })

describe("two server processes on one NATS and one Postgres", () => {
  let db: TestDatabase
  let a: ServerProcess
  let b: ServerProcess
  const streams: Array<StreamClient> = []
  beforeAll(async () => {
    db = await createPostgresDatabase()
    const env = { DATABASE_URL: db.url, NATS_URL, BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY }
    // Both start at once: migrations and the first organisation must happen exactly once.
    ;[a, b] = await Promise.all([startServerProcess(env), startServerProcess(env)])
  })
  afterAll(async () => {
    await Promise.all(streams.map((s) => s.close()))
    await Promise.all([a?.stop(), b?.stop()])
    await db?.drop()
  })

  it("delivers an event accepted by one process to a subscriber of the other, and runs commands across", async () => {
    const restA = createRestClient({ baseUrl: `http://127.0.0.1:${a.port}/v1`, key: BOOTSTRAP_KEY })
    const restB = createRestClient({ baseUrl: `http://127.0.0.1:${b.port}/v1`, key: BOOTSTRAP_KEY })
    expect((await restA.whoami()).organisation.id).toBe((await restB.whoami()).organisation.id)
    const space = await restA.spaces.create({ name: "Cluster" })
    const device = await restA.devices.create({ name: "Roaming", space: { id: space.id } })

    const appOnB = connectStream({ url: `mqtt://127.0.0.1:${b.mqttPort}`, key: BOOTSTRAP_KEY })
    streams.push(appOnB)
    await appOnB.ready()
    const handlers: Array<(e: { data: unknown }) => void> = []
    await appOnB.subscribeEvents(device.id, (e) => handlers.forEach((h) => h(e)))
    const received = next(handlers.push.bind(handlers), "event on process B")
    const published = await createRestClient({ baseUrl: `http://127.0.0.1:${a.port}/v1`, key: device.secretKey }).events.publish({
      name: "hop",
      data: { from: "A" }
    })
    expect(await received).toEqual(published)

    await restA.commands.create({ name: "Ping", device: { id: device.id } })
    const deviceOnB = connectStream({ url: `mqtt://127.0.0.1:${b.mqttPort}`, key: device.secretKey })
    streams.push(deviceOnB)
    await deviceOnB.ready()
    const runs: Array<(r: { slug: string }) => void> = []
    await deviceOnB.onCommand(device.id, "ping", (r) => runs.forEach((h) => h(r)))
    const run = next(runs.push.bind(runs), "command run on process B")
    await restA.commands.run({ slug: "ping", device: { id: device.id } })
    expect((await run).slug).toBe("ping")
  })

  it("closes a device's session on one process when its key is rotated through the other", async () => {
    const restA = createRestClient({ baseUrl: `http://127.0.0.1:${a.port}/v1`, key: BOOTSTRAP_KEY })
    const space = await restA.spaces.create({ name: "Rotate" })
    const device = await restA.devices.create({ name: "Rotated", space: { id: space.id } })
    const onB = connectStream({ url: `mqtt://127.0.0.1:${b.mqttPort}`, key: device.secretKey, mqtt: { reconnectPeriod: 0 } })
    streams.push(onB)
    await onB.ready()
    const closed = new Promise<number>((resolve) => onB.on("disconnect", () => resolve(Date.now())))
    const started = Date.now()
    await restA.devices.rotateSecretKey(device.id)
    const at = await Promise.race([closed, new Promise<number>((_, reject) => setTimeout(() => reject(new Error("session still open after 2 s")), 2_000))])
    expect(at - started).toBeLessThan(1_000)
    // The old key no longer works on B's REST either.
    const old = await fetch(`http://127.0.0.1:${b.port}/v1/whoami`, { headers: { authorization: `Bearer ${device.secretKey}` } })
    expect(old.status).toBe(401)
  })
})
