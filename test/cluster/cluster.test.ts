import { ConfigProvider, Effect, Layer, Schema } from "effect"
import { Entity } from "effect/cluster"
import { Rpc } from "effect/rpc"
import { afterAll, describe, expect, it } from "vitest"
import { ClusterLive, sameSecret } from "../../src/cluster/Cluster.ts"
import { SetupLive } from "../../src/store/setup.ts"
import { Sql } from "../../src/store/Sql.ts"
import { StoreLive } from "../../src/app.ts"
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

const run = <A, E>(env: Record<string, string>, program: Effect.Effect<A, E, Sql | Layer.Success<typeof ClusterLive>>) =>
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

describe("cluster layer", () => {
  const dbs: Array<TestDatabase> = []
  afterAll(async () => {
    for (const db of dbs) await db.drop()
  })

  it("routes messages to one stateful owner on the embedded store (single runner on PGlite)", async () => {
    expect(await run({ DATABASE_URL: "memory://" }, counts)).toEqual([2, 5, 10])
  })

  it("routes messages to one stateful owner on Postgres (HTTP runner, sql-pg storage)", async () => {
    const db = await createPostgresDatabase()
    dbs.push(db)
    expect(await run({ DATABASE_URL: db.url }, counts)).toEqual([2, 5, 10])
  })

  it("on PGlite, the one runner refreshes its shard leases every 20 s, not every 2 s (each refresh holds PGlite's thread)", async () => {
    // The latest lease refresh, sampled three times 2.5 s apart: at 2 s every gap sees a refresh;
    // at 20 s at most one does (the refresh made as the runner starts).
    const refreshes = await run({ DATABASE_URL: "memory://" }, Effect.gen(function*() {
      yield* counts
      const sql = yield* Sql
      const latest = Effect.map(
        Effect.orDie(sql.query<{ at: string; n: number }>("SELECT max(acquired_at)::text AS at, count(*)::int AS n FROM cluster_locks")),
        ([row]) => row
      )
      const samples = [yield* latest]
      for (let i = 0; i < 2; i++) {
        yield* Effect.sleep("2500 millis")
        samples.push(yield* latest)
      }
      return samples
    }))
    expect(refreshes[0].n).toBeGreaterThan(0)
    const changes = refreshes.slice(1).filter((sample, i) => sample.at !== refreshes[i].at).length
    expect(changes).toBeLessThanOrEqual(1)
  })

  it("compares the runner secret exactly", () => {
    expect(sameSecret("abc", "abc")).toBe(true)
    expect(sameSecret("abd", "abc")).toBe(false)
    expect(sameSecret(undefined, "abc")).toBe(false)
    expect(sameSecret("ab", "abc")).toBe(false)
  })
})
