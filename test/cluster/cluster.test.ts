import { ConfigProvider, Effect, Layer, Schema } from "effect"
import { Entity } from "effect/cluster"
import { Rpc } from "effect/rpc"
import { afterAll, describe, expect, it } from "vitest"
import { ClusterLive, sameSecret } from "../../src/cluster/Cluster.ts"
import { SetupLive } from "../../src/store/setup.ts"
import { StoreLive } from "../../src/app.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"

/** A counter entity: the smallest thing that proves messages reach one owner that keeps state. */
const Add = Rpc.make("Add", { payload: { n: Schema.Number }, success: Schema.Number })
const Counter = Entity.make("TestCounter", [Add])
const CounterLive = Counter.toLayer(Effect.gen(function*() {
  let total = 0
  return Counter.of({ Add: ({ payload }) => Effect.sync(() => (total += payload.n)) })
}))

const run = (env: Record<string, string>) =>
  Effect.gen(function*() {
    const client = yield* Counter.client
    const a = yield* client("a").Add({ n: 2 })
    const b = yield* client("a").Add({ n: 3 })
    const other = yield* client("b").Add({ n: 10 })
    return [a, b, other]
  }).pipe(
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
    expect(await run({ DATABASE_URL: "memory://" })).toEqual([2, 5, 10])
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
