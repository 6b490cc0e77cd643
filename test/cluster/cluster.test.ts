import { ConfigProvider, Effect, Layer, Schema } from "effect"
import { Entity, type Sharding } from "effect/cluster"
import { Rpc } from "effect/rpc"
import { afterAll, describe, expect, it } from "vitest"
import { ClusterLive, sameSecret } from "../../src/cluster/Cluster.ts"
import { SetupLive } from "../../src/store/setup.ts"
import { StoreLive } from "../../src/app.ts"
import { Sql } from "../../src/store/Sql.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"

/** A counter entity: the smallest thing that proves messages reach one owner that keeps state. */
const Add = Rpc.make("Add", { payload: { n: Schema.Number }, success: Schema.Number })
const Counter = Entity.make("TestCounter", [Add])
const CounterLive = Counter.toLayer(Effect.gen(function*() {
  let total = 0
  return Counter.of({ Add: ({ payload }) => Effect.sync(() => (total += payload.n)) })
}))

const counts = Effect.gen(function*() {
  const client = yield* Counter.client
  const a = yield* client("a").Add({ n: 2 })
  const b = yield* client("a").Add({ n: 3 })
  const other = yield* client("b").Add({ n: 10 })
  return [a, b, other]
})

/** `program` with a core's store and cluster (and the counter entity) on `env`'s database. */
const withCore = <A, E>(env: Record<string, string>, program: Effect.Effect<A, E, Sharding.Sharding | Sql>) =>
  program.pipe(
    Effect.provide(CounterLive.pipe(
      Layer.provideMerge(ClusterLive),
      Layer.provideMerge(SetupLive),
      Layer.provideMerge(StoreLive),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ LOG_LEVEL: "error", HOST: "127.0.0.1", ...env })))
    )),
    Effect.scoped,
    Effect.runPromise
  )

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
