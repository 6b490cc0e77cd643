import { ConfigProvider, Context, Effect, Exit, Fiber, Layer, Option, Redacted, Schedule, Scope } from "effect"
import { assign } from "xstate"
import { afterEach, describe, expect, it } from "vitest"
import { deviceMachine } from "../../actors/deviceMachine.ts"
import { Bus, type Delivery } from "../../src/bus/Bus.ts"
import { newId } from "../../src/domain/ids.ts"
import { Activity } from "../../src/ingest/Activity.ts"
import { bootstrap } from "../../src/store/bootstrap.ts"
import { migrate } from "../../src/store/migrate.ts"
import { Sql } from "../../src/store/Sql.ts"
import { Supervisor, type SupervisorOptions } from "../../src/supervisor/Supervisor.ts"
import { ClusterLive } from "../../src/cluster/Cluster.ts"
import { EntitiesLive } from "../../src/entities/index.ts"

/**
 * The supervisor alone on an in-memory PGlite: devices and rules seeded with SQL, activity
 * handed over through `Activity` as Ingest does, alerts (raised through the Alert entities of
 * a single cluster runner) observed on the bus and in the store.
 */
interface Harness {
  readonly supervisor: Supervisor["Service"]
  readonly activity: Activity["Service"]
  readonly organisationId: string
  readonly deliveries: Array<Delivery>
  /** Alerts opened so far. */
  opened(): Promise<number>
  query<T>(text: string, params?: ReadonlyArray<unknown>): Promise<Array<T>>
  devices(count: number, spaceId?: string | null): Promise<Array<string>>
  rule(type: "offline", config: Record<string, unknown>, autoResolve: boolean): Promise<string>
  close(): Promise<void>
}

let open: Harness | undefined
afterEach(async () => {
  await open?.close()
  open = undefined
})

const start = async (options: SupervisorOptions = {}): Promise<Harness> => {
  const scope = await Effect.runPromise(Scope.make())
  const setup = Layer.effectDiscard(Effect.gen(function*() {
    yield* migrate
    yield* bootstrap({ bootstrapAppKey: Option.none(), adminEmail: Option.none(), adminPassword: Option.some(Redacted.make("correct horse battery")) })
  }))
  const layer = Supervisor.layerWith(options).pipe(
    Layer.provide(setup),
    Layer.provideMerge(EntitiesLive.pipe(Layer.provideMerge(ClusterLive), Layer.provide(setup))),
    Layer.provideMerge(Layer.mergeAll(Bus.memory, Activity.layer)),
    Layer.provideMerge(Sql.layer({ _tag: "pglite", dataDir: undefined })),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ DATABASE_URL: "memory://", LOG_LEVEL: "error" })))
  )
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  const sql = Context.get(context, Sql)
  const supervisor = Context.get(context, Supervisor)
  const deliveries: Array<Delivery> = []
  await Effect.runPromise(Context.get(context, Bus).onDelivery((d) => deliveries.push(d)).pipe(Scope.provide(scope)))
  const query = <T>(text: string, params?: ReadonlyArray<unknown>) => Effect.runPromise(sql.query<T>(text, params))
  const [{ id: organisationId }] = await query<{ id: string }>("SELECT id FROM organisations LIMIT 1")
  const harness: Harness = {
    supervisor,
    activity: Context.get(context, Activity),
    organisationId,
    deliveries,
    opened: () => query<{ n: number }>("SELECT count(*)::int AS n FROM alerts").then(([row]) => row.n),
    query,
    devices: async (count, spaceId = null) => {
      const now = Date.now()
      const ids = Array.from({ length: count }, () => newId("dev", now))
      await query(
        `INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, created_at, updated_at)
         SELECT u.id, $2, $3, u.id, u.id, $4, $4 FROM unnest($1::text[]) AS u(id)`,
        [ids, organisationId, spaceId, now]
      )
      return ids
    },
    rule: async (type, config, autoResolve) => {
      const id = newId("rul")
      const now = Date.now()
      await query(
        `INSERT INTO alert_rules (id, organisation_id, name, type, severity, enabled, auto_resolve, config, created_at, updated_at)
         VALUES ($1, $2, $1, $3, 'low', true, $4, $5::text::jsonb, $6, $6)`,
        [id, organisationId, type, autoResolve, JSON.stringify(config), now]
      )
      await Effect.runPromise(supervisor.rulesChanged(organisationId))
      return id
    },
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
  open = harness
  return harness
}

const until = async (done: () => boolean | Promise<boolean>, ms: number, what: string) => {
  const deadline = Date.now() + ms
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

const statesOf = (h: Harness, deviceId: string) =>
  h.deliveries.filter((d) => d.deviceId === deviceId && d.topic.endsWith("/alerts")).map((d) => (JSON.parse(d.payload) as { state: string }).state)

describe("supervisor", () => {
  it("opens one alert per device when many fall silent at once, and resolves them in order when they return", async () => {
    // Two small mailboxes: most of the first burst goes through the coalescing overflow.
    const h = await start({ shards: 2, mailboxCapacity: 16 })
    const ruleId = await h.rule("offline", { afterSeconds: 1 }, true)
    const ids = await h.devices(400)
    const seenAt = Date.now()
    for (const id of ids) h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: seenAt })
    await h.supervisor.settled()
    expect(h.supervisor.active()).toBe(400)

    // 400 raises through as many Alert entities, each a persisted cluster message: ~100 a second on PGlite.
    await until(() => ids.every((id) => statesOf(h, id).length === 1), 20_000, "an offline alert for every device")
    const rows = await h.query<{ device_id: string; first_seen_at: number; state: string }>(
      "SELECT device_id, first_seen_at, state FROM alerts WHERE alert_rule_id = $1",
      [ruleId]
    )
    expect(rows).toHaveLength(400)
    expect(new Set(rows.map((r) => r.device_id)).size).toBe(400)
    expect(rows.every((r) => r.first_seen_at === seenAt + 1_000 && r.state === "unresolved")).toBe(true)
    expect(await h.opened()).toBe(400)

    // Back: each device's online follows its offline; its alert resolves, none opens twice (a
    // longer deadline now: resolving 400 alerts takes seconds, and they must not fall silent again).
    await h.query("UPDATE alert_rules SET config = $2::text::jsonb WHERE id = $1", [ruleId, JSON.stringify({ afterSeconds: 600 })])
    await Effect.runPromise(h.supervisor.rulesChanged(h.organisationId))
    for (const id of ids) h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: Date.now() })
    await h.supervisor.settled()
    await until(() => ids.every((id) => statesOf(h, id).length === 2), 20_000, "every alert resolved")
    for (const id of ids) expect(statesOf(h, id)).toEqual(["unresolved", "resolved"])
    const [{ open: stillOpen, total }] = await h.query<{ open: number; total: number }>(
      "SELECT count(*) FILTER (WHERE resolved_at IS NULL)::int AS open, count(*)::int AS total FROM alerts WHERE alert_rule_id = $1",
      [ruleId]
    )
    expect({ stillOpen, total }).toEqual({ stillOpen: 0, total: 400 })
  }, 120_000)

  it("applies a device's offline and online in that order when both are taken in the same batch", async () => {
    const h = await start({ shards: 1 })
    await h.rule("offline", { afterSeconds: 1 }, true)
    const [id] = await h.devices(1)
    h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: Date.now() })
    await h.supervisor.settled()
    // The deadline passes while the event loop is blocked: the timer's offline and the new
    // sign of life reach the shard together. That sign of life is noted while the actor still
    // says online (its timer is late), yet it came after the deadline: offline goes first.
    const blockUntil = Date.now() + 1_200
    while (Date.now() < blockUntil) { /* busy */ }
    const back = Date.now()
    h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: back })
    await until(() => statesOf(h, id).length === 2, 3_000, "the alert opened and resolved")
    expect(statesOf(h, id)).toEqual(["unresolved", "resolved"])
    const resolved = JSON.parse(h.deliveries.filter((d) => d.topic.endsWith("/alerts")).at(-1)!.payload) as { resolvedAt: number }
    expect(resolved.resolvedAt).toBe(back)
  })

  it("keeps a device online on signs of life it only noted, and opens the alert on time from the last of them", async () => {
    const h = await start({ shards: 1 })
    const ruleId = await h.rule("offline", { afterSeconds: 1 }, true)
    const [id] = await h.devices(1)
    const first = Date.now()
    h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: first })
    await h.supervisor.settled()
    const [{ snapshot: before }] = await h.query<{ snapshot: string }>("SELECT snapshot::text FROM device_actors WHERE device_id = $1", [id])
    // Online now: plain signs of life are noted without a step, every 100 ms until just past
    // the first deadline, so the timer fires twice on noted signs before the last one's deadline.
    let last = first
    while (last < first + 1_150) {
      await new Promise((r) => setTimeout(r, 100))
      last = Date.now()
      h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: last, event: { id: `e${last}`, name: "temperature", data: 1, timestamp: last } })
    }
    expect(statesOf(h, id)).toEqual([])
    // Nothing to write behind: the snapshot is the one the first sign of life wrote.
    const [{ snapshot: after }] = await h.query<{ snapshot: string }>("SELECT snapshot::text FROM device_actors WHERE device_id = $1", [id])
    expect(after).toBe(before)
    await until(() => statesOf(h, id).length === 1, 3_000, "the offline alert")
    const openedAt = Date.now()
    const [alert] = await h.query<{ first_seen_at: number }>("SELECT first_seen_at FROM alerts WHERE alert_rule_id = $1", [ruleId])
    expect(alert.first_seen_at).toBe(last + 1_000)
    // On time: a re-armed timer counts what is left from the last sign, not a whole period from the catch-up.
    expect(openedAt - (last + 1_000)).toBeLessThan(400)
  })

  it("restarts a failing actor with exponential backoff from its last snapshot, without replaying its side effects", async () => {
    // A machine whose sign-of-life action throws for a poisoned timestamp (a fraction of a ms).
    const faulty = deviceMachine.provide({
      actions: {
        recordSeen: assign(({ event }) => {
          if (event.type !== "device.seen") return {}
          if (!Number.isInteger(event.at)) throw new Error("poisoned")
          return { lastSeenAt: event.at, timerFrom: event.at }
        })
      }
    })
    const attempts: Array<number> = []
    const h = await start({
      shards: 1,
      machine: faulty,
      restartSchedule: Schedule.max([Schedule.exponential("80 millis"), Schedule.recurs(3)]),
      onRestart: () => attempts.push(Date.now())
    })
    const ruleId = await h.rule("offline", { afterSeconds: 1 }, true)
    const [id] = await h.devices(1)
    h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: Date.now() })
    await until(async () => (await h.opened()) === 1, 3_000, "the offline alert")
    await h.supervisor.settled()
    const [snapshot] = await h.query<{ value: string }>("SELECT snapshot->>'value' AS value FROM device_actors WHERE device_id = $1", [id])
    expect(snapshot.value).toBe("offline")

    h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: Date.now() + 0.5 })
    // One immediate attempt, three with backoff (80, 160, 320 ms), then one without the poison.
    await until(() => attempts.length === 5, 5_000, "five restart attempts")
    await until(() => h.supervisor.active() === 1, 2_000, "the restarted actor")
    const gaps = attempts.slice(1).map((t, i) => t - attempts[i])
    expect(gaps[0]).toBeGreaterThanOrEqual(70)
    expect(gaps[1]).toBeGreaterThanOrEqual(150)
    expect(gaps[2]).toBeGreaterThanOrEqual(300)
    expect(gaps[2]).toBeGreaterThan(gaps[1])
    expect(gaps[1]).toBeGreaterThan(gaps[0])

    // Rehydrated offline: nothing emitted again, no second alert, no second notification.
    await h.supervisor.settled()
    expect(await h.opened()).toBe(1)
    expect(statesOf(h, id)).toEqual(["unresolved"])
    // And it lives on: back online resolves the alert.
    h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: Date.now() })
    await h.supervisor.settled()
    await until(() => statesOf(h, id).length === 2, 3_000, "the alert resolved")
    expect(statesOf(h, id)).toEqual(["unresolved", "resolved"])
    const [{ n }] = await h.query<{ n: number }>("SELECT count(*)::int AS n FROM alerts WHERE alert_rule_id = $1", [ruleId])
    expect(n).toBe(1)
  })

  it("back-pressures a waiting producer while the mailbox is full and never blocks the synchronous one", async () => {
    const h = await start({ shards: 1, mailboxCapacity: 4 })
    const ids = await h.devices(50)
    const at = Date.now()
    // Synchronous hand-over of 50 devices into a mailbox of 4: none is refused or lost.
    for (const id of ids.slice(0, 4)) h.activity.publish({ organisationId: h.organisationId, deviceId: id, at })
    // The mailbox is full now: a producer that can wait is suspended...
    const waiting = Effect.runFork(h.activity.offer({ organisationId: h.organisationId, deviceId: ids[4], at }))
    expect(waiting.pollUnsafe()).toBeUndefined()
    // ...while the synchronous producer goes on (coalescing per device).
    for (const id of ids.slice(5)) {
      h.activity.publish({ organisationId: h.organisationId, deviceId: id, at })
      h.activity.publish({ organisationId: h.organisationId, deviceId: id, at: at + 5 })
    }
    await Effect.runPromise(Fiber.join(waiting))
    await h.supervisor.settled()
    expect(h.supervisor.active()).toBe(50)
    await until(async () => {
      const rows = await h.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM device_actors WHERE device_id = ANY($1::text[]) AND (snapshot->'context'->>'lastSeenAt')::int8 = $2",
        [ids.slice(5), at + 5]
      )
      return rows[0].n === 45
    }, 3_000, "the latest sign of life of every coalesced device")
  })
})
