import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Clock, Effect } from "effect"
import { TestClock } from "effect/testing"
import { describe, expect, it } from "vitest"
import { DeviceOwners } from "../../src/entities/DeviceOwners.ts"
import { bucketOf, DeviceBucket, type Sign, Space } from "../../src/entities/protocol.ts"
import { PASSIVATE_AFTER_MS } from "../../src/entities/DeviceBucket.ts"
import { DeviceReads } from "../../src/store/DeviceReads.ts"
import { Activity } from "../../src/ingest/Activity.ts"
import { createPostgresDatabase, STORE_KINDS } from "../support/databases.ts"
import {
  advance,
  type Core,
  coreLayer,
  alertsOf,
  alertsReach,
  eventually,
  eventuallyAdvancing,
  newDevices,
  newRule,
  newSpace,
  onTestClock,
  organisationId,
  query,
  T0
} from "./support.ts"
import { testClockLayer } from "../support/testClock.ts"

const AFTER_S = 30

/** Signs of life as ingest sends them after commit: their row first (`device_seen.last_seen_at`), then `Seen` to their bucket. */
const seen = (organisation: string, deviceIds: ReadonlyArray<string>, at: number, event?: Sign["event"]) =>
  Effect.gen(function*() {
    yield* query("UPDATE device_seen SET last_seen_at = GREATEST(COALESCE(last_seen_at, 0), $2) WHERE device_id = ANY($1::text[])", [deviceIds, at])
    const client = yield* DeviceBucket.client
    const byBucket = new Map<string, Array<Sign>>()
    for (const deviceId of deviceIds) {
      const sign: Sign = { deviceId, organisationId: organisation, at, event }
      byBucket.set(bucketOf(deviceId), [...(byBucket.get(bucketOf(deviceId)) ?? []), sign])
    }
    yield* Effect.forEach(byBucket, ([bucket, signs]) => client(bucket).Seen({ signs }), { discard: true })
  })

const live = (deviceId: string) =>
  Effect.flatMap(DeviceBucket.client, (client) =>
    Effect.map(client(bucketOf(deviceId)).GetDevices({ deviceIds: [deviceId] }), ([found]) => found))

/** A committed sign of life as ingest passes it on: the device's row first, then `Activity` (SeenSender sends it). */
const activitySign = (organisation: string, deviceId: string, at: number, event?: Sign["event"]) =>
  Effect.andThen(
    query("UPDATE device_seen SET last_seen_at = $2 WHERE device_id = $1", [deviceId, at]),
    Effect.flatMap(Activity, (activity) => Effect.sync(() => activity.publish({ organisationId: organisation, deviceId, at, event })))
  )

/** Until the device's owner holds `at` as its last sign of life, moving TestClock meanwhile. */
const ownerHolds = (deviceId: string, at: number) =>
  eventuallyAdvancing(Effect.flatMap(live(deviceId), (l) => (l?.lastSeenAt === at ? Effect.void : Effect.fail(l))))

/** A device's first sign of life, sent at once: the clock before it was given, and once its owner held it. */
const firstSign = (organisation: string, deviceId: string, at: number) =>
  Effect.gen(function*() {
    const before = yield* Clock.currentTimeMillis
    yield* activitySign(organisation, deviceId, at)
    yield* ownerHolds(deviceId, at)
    return { before, held: yield* Clock.currentTimeMillis }
  })

const stored = (deviceId: string) =>
  Effect.map(
    query<{ value: string; liveness: string; liveness_at: number; wake_at: number | null }>(
      "SELECT snapshot->>'value' AS value, liveness, liveness_at, wake_at FROM device_actors WHERE device_id = $1",
      [deviceId]
    ),
    ([row]) => row === undefined ? undefined : { ...row, liveness_at: Number(row.liveness_at), wake_at: row.wake_at === null ? null : Number(row.wake_at) }
  )

describe.each(STORE_KINDS)("device buckets on a single runner (%s)", (kind) => {
  it("a silent device goes offline once, at its deadline; back online, its alert auto-resolves", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      const space = yield* newSpace(org)
      const rule = yield* newRule(org, "offline", { afterSeconds: AFTER_S }, { autoResolve: true })
      const ids = yield* newDevices(org, 12, space)
      expect(new Set(ids.map(bucketOf)).size).toBeGreaterThan(1)
      yield* seen(org, ids, T0)
      expect(yield* live(ids[0])).toMatchObject({ state: "online", isOnline: true, lastSeenAt: T0 })
      expect(yield* stored(ids[0])).toMatchObject({ value: "online", liveness: "online", liveness_at: T0, wake_at: T0 + AFTER_S * 1000 })

      // Half of them stay active past the first deadline.
      yield* advance("20 seconds")
      yield* seen(org, ids.slice(0, 6), T0 + 20_000)
      yield* advance("15 seconds")
      const first = yield* alertsReach(rule, 6)
      expect(first.map((a) => a.device_id).sort()).toEqual(ids.slice(6).sort())
      for (const a of first) expect(a).toMatchObject({ state: "unresolved", first_seen_at: T0 + AFTER_S * 1000, resolved_at: null })
      for (const id of ids.slice(0, 6)) expect(yield* live(id)).toMatchObject({ state: "online", lastSeenAt: T0 + 20_000 })
      expect(yield* stored(ids[11])).toMatchObject({ value: "offline", liveness: "offline", liveness_at: T0 + AFTER_S * 1000 })
      // The space counts what its devices told it.
      const counts = (yield* Space.client)(space).GetSpace()
      yield* eventually(Effect.flatMap(counts, (c) => (c.devicesOffline === 6 && c.devicesOnline === 6 ? Effect.void : Effect.fail(c))))

      yield* advance("20 seconds")
      const all = yield* alertsReach(rule, 12)
      yield* advance("40 seconds")
      expect(yield* alertsOf(rule)).toHaveLength(12)
      expect(all.filter((a) => a.first_seen_at === T0 + 20_000 + AFTER_S * 1000).map((a) => a.device_id).sort()).toEqual(ids.slice(0, 6).sort())

      // One comes back: online, and its alert resolved by the rule.
      yield* seen(org, [ids[11]], T0 + 200_000)
      const resolved = yield* eventually(Effect.flatMap(alertsOf(rule), (rows) => {
        const row = rows.find((r) => r.device_id === ids[11])
        return row?.resolved_at != null ? Effect.succeed(row) : Effect.fail("not resolved")
      }))
      expect(resolved.state).toBe("resolved")
      expect(yield* live(ids[11])).toMatchObject({ state: "online", lastSeenAt: T0 + 200_000 })
      expect(yield* stored(ids[11])).toMatchObject({ liveness: "online", liveness_at: T0 + 200_000 })
    })), 90_000)

  it("devices of a bucket falling silent together store no cluster message: no wake-up, alert or space change", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      const space = yield* newSpace(org)
      const rule = yield* newRule(org, "offline", { afterSeconds: AFTER_S })
      // Eight devices of one bucket (ids chosen by their hash), falling silent 60 ms apart.
      const ids: Array<string> = []
      for (let i = 0; ids.length < 8; i++) if (bucketOf(`dev_same_${kind}_${i}`) === "b7") ids.push(`dev_same_${kind}_${i}`)
      yield* query(
        `INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, created_at, updated_at)
         SELECT u.id, $2, $3, u.id, u.id, $4, $4 FROM unnest($1::text[]) AS u(id)`,
        [ids, org, space, T0]
      )
      yield* seen(org, ids.slice(0, 4), T0 - 60)
      yield* seen(org, ids.slice(4), T0)
      // Their deadlines are in their rows (what a later owner would sweep), not in cluster messages.
      expect((yield* stored(ids[0]))?.wake_at).toBe(T0 - 60 + AFTER_S * 1000)
      expect((yield* stored(ids[7]))?.wake_at).toBe(T0 + AFTER_S * 1000)
      yield* advance(`${AFTER_S} seconds`)
      const alerts = yield* alertsReach(rule, ids.length)
      for (const a of alerts) expect(a.first_seen_at).toBe((ids.indexOf(a.device_id) < 4 ? T0 - 60 : T0) + AFTER_S * 1000)
      const messages = yield* query<{ entity_type: string; tag: string; n: number }>(
        `SELECT entity_type, tag, count(*)::int AS n FROM cluster_messages
         WHERE entity_type IN ('DeviceBucket', 'AlertBucket') OR tag = 'Changes' GROUP BY entity_type, tag`
      )
      expect(messages).toEqual([])
      const counts = (yield* Space.client)(space).GetSpace()
      yield* eventually(Effect.flatMap(counts, (c) => (c.devicesOffline === 8 && c.openAlerts === 8 ? Effect.void : Effect.fail(c))))
      for (const id of ids) expect(yield* stored(id)).toMatchObject({ liveness: "offline", wake_at: null })
    })), 90_000)

  it("a sign of life that reached the row but not the owner moves the deadline all the same", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      const rule = yield* newRule(org, "offline", { afterSeconds: AFTER_S })
      const [id] = yield* newDevices(org, 1)
      yield* seen(org, [id], T0)
      // Ingested elsewhere, its Seen lost: only the row knows.
      yield* query("UPDATE device_seen SET last_seen_at = $2 WHERE device_id = $1", [id, T0 + 25_000])
      yield* advance("35 seconds")
      expect(yield* live(id)).toMatchObject({ state: "online", lastSeenAt: T0 + 25_000 })
      expect(yield* alertsOf(rule)).toEqual([])
      yield* advance("25 seconds")
      const [alert] = yield* alertsReach(rule, 1)
      expect(alert.first_seen_at).toBe(T0 + 25_000 + AFTER_S * 1000)
    })), 60_000)

  it("devices that fell silent while no process ran: after the restart, their deadlines are swept and each goes offline once", async () => {
    const db = kind === "postgres" ? await createPostgresDatabase() : undefined
    const dir = kind === "pglite" ? mkdtempSync(join(tmpdir(), "voltaic-restart-")) : undefined
    const database = db?.url ?? { dataDir: dir! }
    const process = <A, E>(program: Effect.Effect<A, E, Core>) => Effect.scoped(Effect.provide(program, coreLayer(database)))
    try {
      await Effect.runPromise(Effect.gen(function*() {
        yield* TestClock.setTime(T0 - 10_000)
        const { rule, ids } = yield* process(Effect.gen(function*() {
          yield* advance("10 seconds")
          const org = yield* organisationId
          const rule = yield* newRule(org, "offline", { afterSeconds: 150 })
          const ids = yield* newDevices(org, 3)
          yield* seen(org, ids, T0)
          for (const id of ids) expect(yield* stored(id)).toMatchObject({ value: "online", wake_at: T0 + 150_000 })
          return { rule, ids }
        }))
        // No process runs past the deadline...
        yield* TestClock.adjust("200 seconds")
        // ...then one starts: nothing but the rows knows the devices.
        yield* process(Effect.gen(function*() {
          // In steps of 20 ms (2x real time, not 10x): the bound below is about the sweep's
          // schedule, and real I/O (taking the shards, the reads, the insert) under a loaded
          // machine must not count ten times over (it put one CI run's alerts at +3.9 s).
          yield* advance("5 seconds", "20 millis")
          const alerts = yield* alertsReach(rule, 3)
          for (const a of alerts) expect(a).toMatchObject({ first_seen_at: T0 + 150_000 })
          // Swept once the process owns its shards (the deadline passed while no process ran), within a sweep or two.
          const created = yield* query<{ created_at: number }>("SELECT created_at FROM alerts WHERE alert_rule_id = $1", [rule])
          for (const c of created) expect(Number(c.created_at)).toBeLessThanOrEqual(T0 + 200_000 + 3_000)
          expect(alerts.map((a) => a.device_id).sort()).toEqual([...ids].sort())
          yield* advance("60 seconds")
          expect(yield* alertsOf(rule)).toHaveLength(3)
          for (const id of ids) expect(yield* stored(id)).toMatchObject({ value: "offline", liveness: "offline", wake_at: null })
        }))
      }).pipe(Effect.provide(testClockLayer), Effect.scoped))
    } finally {
      await db?.drop()
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)

  it("rules changed: hosted devices follow a new afterSeconds, and stop being watched without an offline rule", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      const slow = yield* newRule(org, "offline", { afterSeconds: 600 })
      const [a, b] = yield* newDevices(org, 2)
      yield* seen(org, [a, b], T0)
      yield* query("UPDATE alert_rules SET config = $2::text::jsonb WHERE id = $1", [slow, JSON.stringify({ afterSeconds: 10 })])
      const owners = yield* DeviceOwners
      yield* owners.rulesChanged(org)
      yield* advance("15 seconds")
      const alerts = yield* alertsReach(slow, 2)
      expect(alerts.map((r) => r.first_seen_at)).toEqual([T0 + 10_000, T0 + 10_000])

      // Without an offline rule the device is not watched: seen again, it stays out of the counts.
      yield* query("UPDATE alert_rules SET enabled = false WHERE id = $1", [slow])
      yield* owners.rulesChanged(org)
      yield* seen(org, [a], T0 + 20_000)
      yield* eventually(Effect.flatMap(live(a), (l) => (l?.state === "unwatched" ? Effect.void : Effect.fail(l?.state))))
      expect(yield* stored(a)).toMatchObject({ liveness: "other" })
      yield* advance("30 seconds")
      expect(yield* alertsOf(slow)).toHaveLength(2)
    })), 60_000)

  it("devices leaving memory drop the cached device pages holding them, and no others", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      const [idle, other] = yield* newDevices(org, 2)
      // Not watched (no offline rule): idle past PASSIVATE_AFTER_MS, it leaves memory at a sweep.
      yield* seen(org, [idle], T0)
      expect(yield* live(idle)).toMatchObject({ state: "unwatched" })
      const reads = yield* DeviceReads
      let loads = 0
      const page = (id: string) =>
        reads.page(org, `test ${id}`, { devices: (p) => p.items.map((d) => d.id), anySign: false }, Effect.sync(() => {
          loads++
          return { items: [{ id }], total: 1 }
        }))
      yield* page(idle)
      yield* page(other)
      yield* page(idle)
      expect({ loads, pages: reads.pages() }).toEqual({ loads: 2, pages: 2 })
      yield* advance(PASSIVATE_AFTER_MS + 90_000, "1 second")
      expect(yield* live(idle)).toBeUndefined()
      expect(reads.pages()).toBe(1)
      yield* page(other)
      expect(loads).toBe(2)
      yield* page(idle)
      expect(loads).toBe(3)
    })), 60_000)

  it("threshold and anomaly rules raise from the events they watch; an auto-resolving one clears", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      const hot = yield* newRule(org, "threshold", { eventName: "temperature", path: "celsius", max: 80 }, { autoResolve: true })
      const odd = yield* newRule(org, "anomaly", { eventName: "power", path: "watts", window: 4, zScore: 3 })
      const [boiler, meter] = yield* newDevices(org, 2)
      const event = (id: string, name: string, data: unknown) => ({ id, name, data, timestamp: T0 })
      yield* seen(org, [boiler], T0 + 1, event("evt_1", "temperature", { celsius: 85 }))
      const [raised] = yield* alertsReach(hot, 1)
      expect(raised).toMatchObject({ device_id: boiler, state: "unresolved", event_id: "evt_1" })
      yield* seen(org, [boiler], T0 + 2, event("evt_2", "temperature", { celsius: 60 }))
      yield* eventually(Effect.flatMap(alertsOf(hot), ([row]) => (row?.resolved_at != null ? Effect.void : Effect.fail("open"))))

      let n = 0
      for (const watts of [100, 102, 98, 101, 99]) yield* seen(org, [meter], T0 + 10 + ++n, event(`evt_p${n}`, "power", { watts }))
      yield* seen(org, [meter], T0 + 100, event("evt_spike", "power", { watts: 400 }))
      const [anomaly] = yield* alertsReach(odd, 1)
      expect(anomaly).toMatchObject({ device_id: meter, state: "unresolved" })
      // Baselines are written behind (their row re-derives nothing else).
      yield* advance("6 seconds")
      yield* seen(org, [meter], T0 + 6_200, event("evt_p7", "power", { watts: 100 }))
      yield* eventually(Effect.flatMap(
        query<{ n: number }>("SELECT jsonb_array_length(snapshot->'context'->'baselines'->$2) AS n FROM device_actors WHERE device_id = $1", [meter, odd]),
        ([row]) => (Number(row?.n) === 4 ? Effect.void : Effect.fail(row?.n))
      ))
    })), 60_000)

  it("ingest's signs reach the owner through Activity; a session sign is stored first", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      yield* newRule(org, "offline", { afterSeconds: AFTER_S })
      // Two devices of one bucket: the second sign may find the first one's send on its way.
      const ids = yield* newDevices(org, 65)
      const session = ids.find((id, i) => ids.some((other, j) => j < i && bucketOf(other) === bucketOf(id)))!
      const device = ids.find((id) => id !== session && bucketOf(id) === bucketOf(session))!
      const activity = yield* Activity
      yield* query("UPDATE device_seen SET last_seen_at = $2 WHERE device_id = $1", [device, T0 + 1])
      activity.publish({ organisationId: org, deviceId: device, at: T0 + 1 })
      yield* activity.offer({ organisationId: org, deviceId: session, at: T0 + 2, session: true })
      const [row] = yield* query<{ last_seen_at: number }>("SELECT last_seen_at FROM device_seen WHERE device_id = $1", [session])
      expect(Number(row.last_seen_at)).toBe(T0 + 2)
      // Sends to one bucket are spaced on the clock (SeenSender's SPACING_MS, 250 ms), and a send that
      // failed is retried 200 ms later on it: what came while the first send was on its way goes once
      // the clock has moved. At most 10 s of it, well before the devices' 30 s deadline.
      yield* eventuallyAdvancing(Effect.flatMap(live(device), (l) => (l?.isOnline === true ? Effect.void : Effect.fail(l))))
      yield* eventuallyAdvancing(Effect.flatMap(live(session), (l) => (l?.lastSeenAt === T0 + 2 ? Effect.void : Effect.fail(l))))
      const owners = yield* DeviceOwners
      const answers = yield* owners.live([device, session, "dev_unknown"])
      expect([...answers.keys()].sort()).toEqual([device, session].sort())
    })), 60_000)

  it("a device's repeated bare signs reach its owner as refreshes, once per window; a watched event, and the first sign after a silence, go at once", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      // The shortest offline rule (30 s) allows a refresh window of SeenSender's REFRESH_MS (5 s).
      yield* newRule(org, "offline", { afterSeconds: AFTER_S })
      yield* newRule(org, "threshold", { eventName: "temperature", path: "celsius", max: 80 })
      const [device] = yield* newDevices(org, 1)
      const sign = (at: number, event?: Sign["event"]) => activitySign(org, device, at, event)
      const reaches = (at: number) => ownerHolds(device, at)

      // Never sent: at once (the spacing is not even due).
      const first = yield* firstSign(org, device, T0 + 1)

      // Sent lately, and nothing a rule looks at: it waits for the window, not the 250 ms spacing.
      yield* advance("1 second")
      yield* sign(T0 + 1_001)
      yield* advance("2 seconds")
      expect((yield* live(device))?.lastSeenAt).toBe(T0 + 1)
      yield* reaches(T0 + 1_001)
      const refreshed = yield* Clock.currentTimeMillis
      expect(refreshed).toBeGreaterThanOrEqual(first.before + 5_000)
      expect(refreshed).toBeLessThanOrEqual(first.held + 5_500)

      // An event a rule looks at goes at the spacing, though the device was sent just now.
      yield* advance("300 millis")
      const at = T0 + 7_000
      yield* sign(at, { id: "evt_watched", name: "temperature", data: { celsius: 20 }, timestamp: at })
      yield* reaches(at)
      expect(yield* Clock.currentTimeMillis).toBeLessThanOrEqual(refreshed + 300 + 400)

      // Silent for longer than the window: its next sign may bring news (online again), and goes at once.
      yield* advance("6 seconds")
      const back = yield* Clock.currentTimeMillis
      yield* sign(T0 + 20_000)
      yield* reaches(T0 + 20_000)
      expect(yield* Clock.currentTimeMillis).toBeLessThanOrEqual(back + 400)
    })), 60_000)

  it("a short offline rule shortens the refresh window to a third of it", () =>
    onTestClock(kind, Effect.gen(function*() {
      const org = yield* organisationId
      yield* newRule(org, "offline", { afterSeconds: 60 })
      yield* newRule(org, "offline", { afterSeconds: 3 })
      const [device] = yield* newDevices(org, 1)
      const first = yield* firstSign(org, device, T0 + 1)
      yield* advance("300 millis")
      yield* activitySign(org, device, T0 + 301)
      yield* ownerHolds(device, T0 + 301)
      const refreshed = yield* Clock.currentTimeMillis
      // The window is 1 s (3 s / 3), not 5 s; and it is a wait, not the 250 ms spacing.
      expect(refreshed).toBeGreaterThanOrEqual(first.before + 1_000)
      expect(refreshed).toBeLessThanOrEqual(first.held + 1_500)
    })), 60_000)
})
