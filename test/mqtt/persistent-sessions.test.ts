import { connect as connectNats } from "@nats-io/transport-node"
import { Effect } from "effect"
import mqtt, { type IClientOptions, type MqttClient } from "mqtt"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { ControlMessage } from "../../src/bus/Bus.ts"
import { CONTROL_SUBJECT } from "../../src/bus/topics.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"
import {
  closedBy,
  collect,
  connected,
  connectUrl,
  type MqttTestApp,
  type Received,
  seed,
  type Seeded,
  startMqttApp,
  subscribe,
  WAIT_MS,
  within
} from "../support/mqtt.ts"
import { type PrivateNats, startPrivateNats } from "../support/nats.ts"

const tcpUrl = (t: MqttTestApp) => {
  if (t.server === undefined) throw new Error("the app does not listen")
  return `mqtt://127.0.0.1:${t.server.port}`
}

/** Polls `probe` until it holds, for at most `WAIT_MS`. */
const until = async (probe: () => boolean | Promise<boolean>, what: string): Promise<void> => {
  const deadline = Date.now() + WAIT_MS
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

interface Opened {
  readonly client: MqttClient
  /** Every message from the CONNACK on (a queue is sent right behind it). */
  readonly received: Array<Received>
  readonly sessionPresent: boolean
}

/** Connects over TCP, collecting messages before the CONNACK is read. */
const open = async (t: MqttTestApp, options: IClientOptions): Promise<Opened> => {
  const client = mqtt.connect(tcpUrl(t), { reconnectPeriod: 0, connectTimeout: WAIT_MS, protocolVersion: 4, ...options })
  const received = collect(client)
  let sessionPresent = false
  client.once("connect", (connack) => {
    sessionPresent = connack.sessionPresent
  })
  await connected(client)
  return { client, received, sessionPresent }
}

const names = (received: ReadonlyArray<Received>) => received.map((m) => m.json.name as string)

/** Deliveries stored for `clientId` and not acknowledged. */
const queuedFor = async (t: MqttTestApp, clientId: string) =>
  (await Effect.runPromise(t.sql.query<{ count: number }>(
    "SELECT count(*)::int AS count FROM mqtt_outgoing WHERE client_id = $1 AND acked_at IS NULL",
    [clientId]
  )))[0].count

/** A device publishes one event at QoS 1 on `t` (acknowledged once stored). */
const publishEvent = async (t: MqttTestApp, device: Seeded["device"], name: string) => {
  const client = await connectUrl(tcpUrl(t), { username: device.key, password: " " })
  await client.publishAsync(`devices/${device.id}/events/${name}`, "1", { qos: 1 })
  await client.endAsync()
}

describe("a persistent MQTT session on two processes sharing Postgres and NATS", () => {
  let nats: PrivateNats
  let db: TestDatabase
  let a: MqttTestApp
  let b: MqttTestApp
  let s: Seeded
  const clients: Array<MqttClient> = []
  const keep = <T extends { client: MqttClient }>(opened: T) => {
    clients.push(opened.client)
    return opened
  }

  beforeAll(async () => {
    nats = await startPrivateNats()
    db = await createPostgresDatabase()
    a = await startMqttApp({ database: db.url }, { listen: true, env: { NATS_URL: nats.url } })
    b = await startMqttApp({ database: db.url }, { listen: true, env: { NATS_URL: nats.url } })
    s = await seed(a)
  }, 60_000)
  afterAll(async () => {
    await Promise.all(clients.map((client) => client.endAsync(true)))
    await a?.close()
    await b?.close()
    await db?.drop()
    await nats?.kill()
  })

  it("receives on the other process what was queued for it while away, once, and its subscription still works", async () => {
    const clientId = "moving-session"
    const topic = `devices/${s.device.id}/events/+`
    const first = keep(await open(a, { clientId, clean: false, username: BOOTSTRAP_KEY }))
    expect(first.sessionPresent).toBe(false)
    expect(await subscribe(first.client, topic)).toEqual([1])
    await first.client.endAsync()
    // A clean subscriber on each process: once it has an event, that process has queued it.
    const watchers = [keep(await open(a, { username: BOOTSTRAP_KEY })), keep(await open(b, { username: BOOTSTRAP_KEY }))]
    for (const watcher of watchers) await subscribe(watcher.client, topic)
    const seenByBoth = (name: string) => until(() => watchers.every((w) => names(w.received).includes(name)), `${name} on both processes`)

    // Ingested on A, then on B: each process receives both from the bus and queues both.
    await publishEvent(a, s.device, "away-on-a")
    await seenByBoth("away-on-a")
    await publishEvent(b, s.device, "away-on-b")
    await seenByBoth("away-on-b")
    expect(await queuedFor(b, clientId)).toBe(2)

    const moved = keep(await open(b, { clientId, clean: false, username: BOOTSTRAP_KEY }))
    expect(moved.sessionPresent).toBe(true)
    await until(() => moved.received.length >= 2, "the queued events on B")
    // Live, from the other process, through the restored subscription.
    await publishEvent(a, s.device, "live-after")
    await until(() => names(moved.received).includes("live-after"), "the live event on B")
    await seenByBoth("live-after")
    expect(names(moved.received)).toEqual(["away-on-a", "away-on-b", "live-after"])
    expect(moved.received.every((m) => m.qos === 1 && m.json.device.id === s.device.id)).toBe(true)
    await until(async () => (await queuedFor(a, clientId)) === 0, "every delivery acknowledged")
  })

  it("closes the client id's connection on the first process when it connects to the second, and keeps it from another credential", async () => {
    const clientId = "roaming-session"
    const onA = keep(await open(a, { clientId, clean: false, username: BOOTSTRAP_KEY }))
    await subscribe(onA.client, `devices/${s.other.id}/events/+`)
    const replaced = closedBy(onA.client)
    const onB = keep(await open(b, { clientId, clean: false, username: BOOTSTRAP_KEY }))
    expect(onB.sessionPresent).toBe(true)
    await replaced
    expect(onB.client.connected).toBe(true)
    // The stored session is its credential's on every process.
    await expect(connectUrl(tcpUrl(a), { clientId, clean: false, username: s.tenant.appKey })).rejects.toThrow(/Identifier rejected/)
    await publishEvent(a, s.other, "after-move")
    await until(() => names(onB.received).includes("after-move"), "the event on B")
    expect(names(onA.received)).toEqual([])
    expect(a.logs.map((l) => l.message)).toContainEqual(expect.stringMatching(/client id belongs to another credential's session/))
  })

  it("leaves a connection alone when a notice of an older connection of its client id arrives after it", async () => {
    // The notices on the bus, as another process sees them (the same NATS, its own connection).
    const nc = await connectNats({ servers: nats.url })
    const notices: Array<ControlMessage> = []
    const sub = nc.subscribe(CONTROL_SUBJECT, {
      callback: (_e, msg) => {
        notices.push(JSON.parse(msg.string()) as ControlMessage)
      }
    })
    try {
      const noticeOf = async (clientId: string) => {
        await until(() => notices.some((n) => n.type === "mqtt.connected" && n.clientId === clientId), `the notice of ${clientId}`)
        const notice = notices.find((n) => n.type === "mqtt.connected" && n.clientId === clientId)
        if (notice?.type !== "mqtt.connected" || notice.at === undefined) throw new Error(`no admission time in ${JSON.stringify(notice)}`)
        return { ...notice, at: notice.at }
      }
      /** What another process would send: this connection's id admitted there, `ms` after this one. */
      const elsewhere = (notice: Awaited<ReturnType<typeof noticeOf>>, ms: number) =>
        nc.publish(CONTROL_SUBJECT, JSON.stringify({ ...notice, origin: "another-process", at: notice.at + ms }))

      const kept = keep(await open(b, { clientId: "late-notice", username: BOOTSTRAP_KEY }))
      const keptNotice = await noticeOf("late-notice")
      const marker = keep(await open(b, { clientId: "late-notice-marker", username: BOOTSTRAP_KEY }))
      const markerNotice = await noticeOf("late-notice-marker")
      // Admitted elsewhere a second before this connection: NATS brought it late.
      elsewhere(keptNotice, -1_000)
      // Published after it on the same subject, so handled after it: once the marker is closed, the late notice was read.
      elsewhere(markerNotice, 1)
      await closedBy(marker.client)
      // Still served: a round trip on it, and no close said.
      const closedLine = /client late-notice from .* closed: its client id connected to another process/
      expect(await subscribe(kept.client, `devices/${s.device.id}/events/+`)).toEqual([1])
      expect(kept.client.connected).toBe(true)
      expect(b.logs.filter((l) => closedLine.test(l.message))).toEqual([])
      // A connection admitted elsewhere after this one takes the client id over.
      const replaced = closedBy(kept.client)
      elsewhere(keptNotice, 1)
      await replaced
      expect(b.logs.filter((l) => closedLine.test(l.message))).toHaveLength(1)
    } finally {
      sub.unsubscribe()
      await nc.close()
    }
  })
})

describe.each(STORE_KINDS)("a persistent MQTT session across a restart on %s", (kind) => {
  let dir: string | undefined
  let db: TestDatabase | undefined
  let t: MqttTestApp | undefined

  beforeAll(async () => {
    if (kind === "pglite") dir = await mkdtemp(join(tmpdir(), "voltaic-mqtt-sessions-"))
    else db = await createPostgresDatabase()
  })
  afterAll(async () => {
    await t?.close()
    await db?.drop()
    if (dir !== undefined) await rm(dir, { recursive: true, force: true })
  })

  it("keeps its subscriptions and queue, and queues for it after the restart too", async () => {
    const start = () => startMqttApp(dir !== undefined ? { dataDir: dir } : { database: db?.url ?? "" }, { listen: true })
    t = await start()
    const s = await seed(t)
    const clientId = "restarted-session"
    const first = await open(t, { clientId, clean: false, username: BOOTSTRAP_KEY })
    await subscribe(first.client, `devices/${s.device.id}/events/+`)
    await first.client.endAsync()
    await publishEvent(t, s.device, "before-restart")
    const before = t
    await until(async () => (await queuedFor(before, clientId)) === 1, "the event queued")
    await t.close()

    t = await start()
    const after = t
    // Read from the store at start: which devices stored sessions watch.
    await publishEvent(t, s.device, "after-restart")
    await until(async () => (await queuedFor(after, clientId)) === 2, "the event queued after the restart")
    const back = await open(t, { clientId, clean: false, username: BOOTSTRAP_KEY })
    expect(back.sessionPresent).toBe(true)
    await until(() => back.received.length >= 2, "the queued events")
    await publishEvent(t, s.device, "live")
    await within(until(() => names(back.received).includes("live"), "the live event"), "the live event")
    expect(names(back.received)).toEqual(["before-restart", "after-restart", "live"])
    await back.client.endAsync()
  }, 60_000)
})
