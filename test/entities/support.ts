import { ConfigProvider, Duration, Effect, Layer, Schedule } from "effect"
import { TestClock } from "effect/testing"
import { coreOn } from "../../src/app.ts"
import { Bus } from "../../src/bus/Bus.ts"
import { CLUSTER_TIMINGS, ClusterTimings } from "../../src/cluster/Cluster.ts"
import { newId } from "../../src/domain/ids.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"
import { createPostgresDatabase, type StoreKind } from "../support/databases.ts"
import { testClockLayer } from "../support/testClock.ts"

/** An epoch for TestClock: the cluster compares `deliver_at` with the clock's milliseconds. */
export const T0 = Date.parse("2026-01-01T00:00:00Z")

/**
 * Shard locks refreshed once per six hours of TestClock, so never within a test. Their refresh
 * waits for the store under a deadline on the clock; a step of TestClock could pass that deadline
 * while the refresh was still in the store (on a loaded machine: CI runs suites side by side on two
 * cores), the runner then released every shard, and a message sent while no step ran waited for
 * them for good (seen as a test of this file timing out, or an entity never answering). Lock loss
 * and refresh are a real-time matter, tested on the live clock by the two-runner tests.
 */
const TEST_CLOCK_TIMINGS = { ...CLUSTER_TIMINGS, shardLockRefreshInterval: "6 hours", shardLockExpiration: "18 hours" } as const

/**
 * The core of one process (store, bus in memory, cluster and its entities) on a database: a
 * `postgres://` URL, `memory://`, or `{ dataDir }` for PGlite in a directory (which a later core
 * may open again, as a restart would).
 */
export const coreLayer = (database: string | { readonly dataDir: string }) =>
  coreOn(Bus.memory).pipe(
    Layer.provide(Layer.succeed(ClusterTimings, TEST_CLOCK_TIMINGS)),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({
      ...(typeof database === "string" ? { DATABASE_URL: database } : { DATA_DIR: database.dataDir }),
      BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
      ADMIN_EMAIL,
      ADMIN_PASSWORD,
      LOG_LEVEL: "error",
      HOST: "127.0.0.1",
      CLUSTER_HOST: "127.0.0.1"
    })))
  )
export type Core = Layer.Success<ReturnType<typeof coreLayer>>

/**
 * Moves TestClock by `total` in steps, letting the cluster's real I/O (SQL) run between them: a
 * single big jump would also expire the cluster's own operation timeouts while a statement is in flight.
 * Each step also waits 2 ms of real time and one round-trip to the store, so the clock goes no
 * faster than the store answers (the shard locks are out of reach of the clock: `TEST_CLOCK_TIMINGS`).
 * Steps of 100 ms by default: a deadline's work (a bucket's timer, then the alert it sends through
 * stored messages, read when sent, and on Postgres also every 250 ms of this clock) gets several
 * steps of real time before the test looks for it. A step took ~13 ms (the wait 10 ms, SQL 1.4,
 * the clock's own work 1.4), and deviceBucket.test.ts 163 s; with 2 ms, 80 s (132 s with two
 * busy loops beside it on two cores, against 197 s). Under that load, 2 ms on the plain TestClock
 * failed 4 of 20 runs (an alert missed after fractional clock readings, `testClockLayer`; two
 * waits on Postgres that never ended, with no defect logged); on `testClockLayer`, none of 9.
 * Steps of a second took this file from 150 to 112 s, and a run under load once missed an alert after them.
 */
export const advance = (total: Duration.Input, step: Duration.Input = "100 millis") =>
  Effect.gen(function*() {
    const steps = Math.ceil(Duration.toMillis(Duration.fromInputUnsafe(total)) / Duration.toMillis(Duration.fromInputUnsafe(step)))
    for (let i = 0; i < steps; i++) {
      yield* TestClock.adjust(step)
      yield* TestClock.withLive(Effect.sleep("2 millis"))
      yield* query("SELECT 1")
    }
  })

/**
 * Retries `check` until it succeeds, moving TestClock by `step` after each miss (at most `attempts`
 * times): for work that waits on the clock itself, such as a send to a bucket spaced or retried
 * after a failure (SeenSender), which `eventually` alone would wait on for good.
 */
export const eventuallyAdvancing = <A, E, R>(check: Effect.Effect<A, E, R>, step: Duration.Input = "100 millis", attempts = 100) =>
  Effect.retry(Effect.tapError(check, () => advance(step, step)), { times: attempts })

/** Retries `check` on the live clock until it succeeds (bounded); the cluster's work is real I/O. */
export const eventually = <A, E, R>(check: Effect.Effect<A, E, R>, attempts = 200) =>
  TestClock.withLive(Effect.retry(check, { schedule: Schedule.spaced("25 millis"), times: attempts }))

/**
 * Runs `program` against a fresh core of the given kind on TestClock, which starts at T0 - 10 s
 * and is moved to T0 before `program` (the runner takes its shards on its own schedule).
 */
export const onTestClock = async <A, E>(kind: StoreKind, program: Effect.Effect<A, E, Core>): Promise<A> => {
  const db = kind === "postgres" ? await createPostgresDatabase() : undefined
  try {
    return await Effect.runPromise(
      Effect.gen(function*() {
        yield* TestClock.setTime(T0 - 10_000)
        return yield* Effect.andThen(advance("10 seconds"), program).pipe(Effect.provide(coreLayer(db?.url ?? "memory://")))
      }).pipe(Effect.provide(testClockLayer), Effect.scoped)
    )
  } finally {
    await db?.drop()
  }
}

/** Rows of the store, in a core's context. */
export const query = <T>(text: string, params?: ReadonlyArray<unknown>) => Effect.flatMap(Sql, (sql) => Effect.orDie(sql.query<T>(text, params)))

export const organisationId = Effect.map(query<{ id: string }>("SELECT id FROM organisations ORDER BY created_at LIMIT 1"), ([row]) => row.id)

export const newSpace = (organisation: string) =>
  Effect.gen(function*() {
    const id = newId("spc")
    yield* query(
      "INSERT INTO spaces (id, organisation_id, name, created_at, updated_at) VALUES ($1, $2, $1, $3, $3)",
      [id, organisation, T0]
    )
    return id
  })

export const newDevices = (organisation: string, count: number, spaceId: string | null = null) =>
  Effect.gen(function*() {
    const ids = Array.from({ length: count }, () => newId("dev", T0))
    yield* query(
      `INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, created_at, updated_at)
       SELECT u.id, $2, $3, u.id, u.id, $4, $4 FROM unnest($1::text[]) AS u(id)`,
      [ids, organisation, spaceId, T0]
    )
    return ids
  })

export const newRule = (
  organisation: string,
  type: "offline" | "threshold" | "anomaly",
  config: Record<string, unknown>,
  options: { readonly autoResolve?: boolean; readonly spaceId?: string } = {}
) =>
  Effect.gen(function*() {
    const id = newId("rul")
    yield* query(
      `INSERT INTO alert_rules (id, organisation_id, name, type, severity, enabled, auto_resolve, config, space_id, created_at, updated_at)
       VALUES ($1, $2, $1, $3, 'low', true, $4, $5::text::jsonb, $6, $7, $7)`,
      [id, organisation, type, options.autoResolve ?? false, JSON.stringify(config), options.spaceId ?? null, T0]
    )
    return id
  })

export interface AlertRow {
  readonly id: string
  readonly device_id: string
  readonly alert_rule_id: string
  readonly state: string
  readonly first_seen_at: number
  readonly last_seen_at: number
  readonly resolved_at: number | null
  readonly event_id: string | null
}

export const alertsOf = (ruleId: string) =>
  Effect.map(
    query<AlertRow>(
      "SELECT id, device_id, alert_rule_id, state, first_seen_at, last_seen_at, resolved_at, event_id FROM alerts WHERE alert_rule_id = $1 ORDER BY first_seen_at, device_id",
      [ruleId]
    ),
    (rows) =>
      rows.map((r) => ({
        ...r,
        first_seen_at: Number(r.first_seen_at),
        last_seen_at: Number(r.last_seen_at),
        resolved_at: r.resolved_at === null ? null : Number(r.resolved_at)
      }))
  )

/** Waits until the rule has `count` alerts (fails with the count so far). */
export const alertsReach = (ruleId: string, count: number) =>
  eventually(Effect.flatMap(alertsOf(ruleId), (rows) => (rows.length >= count ? Effect.succeed(rows) : Effect.fail(`${rows.length} alerts`))))
