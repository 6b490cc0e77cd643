import { ConfigProvider, Effect, Layer, Schema } from "effect"
import { ClusterSchema, Entity, type Sharding } from "effect/cluster"
import { Rpc } from "effect/rpc"
import { TestClock } from "effect/testing"
import { afterAll, describe, expect, it } from "vitest"
import { ClusterLive, sameSecret, SINGLE_RUNNER_POLL } from "../../src/cluster/Cluster.ts"
import { SetupLive } from "../../src/store/setup.ts"
import { StoreLive } from "../../src/app.ts"
import { Sql } from "../../src/store/Sql.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"
import { testClockLayer } from "../support/testClock.ts"

/** A counter entity: the smallest thing that proves messages reach one owner that keeps state. */
const Add = Rpc.make("Add", { payload: { n: Schema.Number }, success: Schema.Number })
const Counter = Entity.make("TestCounter", [Add])
const CounterLive = Counter.toLayer(Effect.gen(function*() {
  let total = 0
  return Counter.of({ Add: ({ payload }) => Effect.sync(() => (total += payload.n)) })
}))

/** The same, its message stored before it is delivered (as alerts' Acknowledge and Resolve are). */
const AddStored = Rpc.make("AddStored", { payload: { n: Schema.Number }, success: Schema.Number }).annotate(ClusterSchema.Persisted, true)
const StoredCounter = Entity.make("TestStoredCounter", [AddStored])
const StoredCounterLive = StoredCounter.toLayer(Effect.gen(function*() {
  let total = 0
  return StoredCounter.of({ AddStored: ({ payload }) => Effect.sync(() => (total += payload.n)) })
}))

const counts = Effect.gen(function*() {
  const client = yield* Counter.client
  const a = yield* client("a").Add({ n: 2 })
  const b = yield* client("a").Add({ n: 3 })
  const other = yield* client("b").Add({ n: 10 })
  return [a, b, other]
})

/** A core's store and cluster, with `entities`, on `env`'s database. */
const coreWith = <E>(env: Record<string, string>, entities: Layer.Layer<never, E, Sharding.Sharding>) =>
  entities.pipe(
    Layer.provideMerge(ClusterLive),
    Layer.provideMerge(SetupLive),
    Layer.provideMerge(StoreLive),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ LOG_LEVEL: "error", HOST: "127.0.0.1", ...env })))
  )

/** `program` with a core (and the counter entity) on `env`'s database. */
const withCore = <A, E>(env: Record<string, string>, program: Effect.Effect<A, E, Sharding.Sharding | Sql>) =>
  program.pipe(Effect.provide(coreWith(env, CounterLive)), Effect.scoped, Effect.runPromise)

const run = (env: Record<string, string>) => withCore(env, counts)

describe("cluster layer", () => {
  const dbs: Array<TestDatabase> = []
  afterAll(async () => {
    for (const db of dbs) await db.drop()
  })

  it("routes messages to one stateful owner on the embedded store (single runner on PGlite)", async () => {
    expect(await run({ DATABASE_URL: "memory://" })).toEqual([2, 5, 10])
  })

  it("holds the single runner's shards in memory on PGlite: no lease rows in the store to refresh", async () => {
    const tables = await withCore({ DATABASE_URL: "memory://" }, Effect.gen(function*() {
      expect(yield* counts).toEqual([2, 5, 10])
      const sql = yield* Sql
      return yield* sql.query<{ t: string | null }>("SELECT to_regclass('cluster_locks')::text AS t, to_regclass('cluster_runners')::text AS r")
    }))
    expect(tables).toEqual([{ t: null, r: null }])
  })

  it(`delivers a stored message on PGlite as it is sent, not at the single runner's timed read of the store (every ${SINGLE_RUNNER_POLL})`, async () => {
    const program = Effect.gen(function*() {
      // The runner takes its shards on its own schedule: TestClock is moved ten seconds first, in steps.
      for (let i = 0; i < 100; i++) {
        yield* TestClock.adjust("100 millis")
        yield* TestClock.withLive(Effect.sleep("10 millis"))
      }
      // From here the clock stands still: a message that waited for the timed read would never be answered.
      const client = yield* StoredCounter.client
      const first = yield* client("a").AddStored({ n: 2 })
      const second = yield* client("a").AddStored({ n: 3 })
      return [first, second]
    }).pipe(
      Effect.provide(coreWith({ DATABASE_URL: "memory://" }, StoredCounterLive)),
      (answered) => Effect.raceFirst(answered, TestClock.withLive(Effect.andThen(Effect.sleep("20 seconds"), Effect.fail(new Error("the stored message was not answered"))))),
      Effect.provide(testClockLayer),
      Effect.scoped
    )
    expect(await Effect.runPromise(program)).toEqual([2, 5])
  })

  it("routes messages to one stateful owner on Postgres (HTTP runner, sql-pg storage)", async () => {
    const db = await createPostgresDatabase()
    dbs.push(db)
    expect(await run({ DATABASE_URL: db.url })).toEqual([2, 5, 10])
  })

  it("compares the runner secret exactly", () => {
    expect(sameSecret("abc", "abc")).toBe(true)
    expect(sameSecret("abd", "abc")).toBe(false)
    expect(sameSecret(undefined, "abc")).toBe(false)
    expect(sameSecret("ab", "abc")).toBe(false)
  })
})
