import { Context, Effect, Exit, Layer, Redacted, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { loadMigrations, migrate } from "../../src/store/migrate.ts"
import { Sql, type SqlClient } from "../../src/store/Sql.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"

describe.each(STORE_KINDS)("the store on %s", (kind) => {
  let scope: Scope.Closeable
  let sql: SqlClient
  let db: TestDatabase | undefined
  const run = <A, E>(effect: Effect.Effect<A, E, Sql>) => Effect.runPromise(Effect.provideService(effect, Sql, sql))

  beforeAll(async () => {
    if (kind === "postgres") db = await createPostgresDatabase()
    scope = await Effect.runPromise(Scope.make())
    const target = db ? { _tag: "postgres" as const, url: Redacted.make(db.url) } : { _tag: "pglite" as const, dataDir: undefined }
    const context = await Effect.runPromise(Layer.buildWithScope(Sql.layer(target), scope))
    sql = Context.get(context, Sql)
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await db?.drop()
  })

  it("applies every migration file once and records it", async () => {
    const files = await Effect.runPromise(loadMigrations)
    expect(files.length).toBeGreaterThan(0)
    expect(await run(migrate)).toEqual(files.map((f) => f.name))
    expect(await run(migrate)).toEqual([])
    const rows = await run(sql.query<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version"))
    expect(rows.map((r) => r.version)).toEqual(files.map((f) => f.version))
  })

  it("returns bigint columns as numbers and jsonb as objects", async () => {
    const [row] = await run(sql.query<{ n: unknown; j: unknown }>("SELECT 1795000000000::int8 AS n, '{\"a\":[1]}'::jsonb AS j"))
    expect(row).toEqual({ n: 1795000000000, j: { a: [1] } })
  })

  it("rolls a transaction back when its body fails, keeping the failure", async () => {
    const exit = await Effect.runPromiseExit(
      Effect.provideService(
        sql.transaction((tx) =>
          Effect.gen(function*() {
            yield* tx.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_rollback', 'x', 1, 1)")
            return yield* Effect.fail("stop" as const)
          })
        ),
        Sql,
        sql
      )
    )
    expect(Exit.isFailure(exit)).toBe(true)
    const rows = await run(sql.query("SELECT 1 FROM organisations WHERE id = 'org_rollback'"))
    expect(rows).toEqual([])
  })

  it("commits a transaction whose body succeeds", async () => {
    await run(sql.transaction((tx) => tx.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_commit', 'x', 1, 1)")))
    expect(await run(sql.query("SELECT id FROM organisations WHERE id = 'org_commit'"))).toEqual([{ id: "org_commit" }])
  })

  it("reports a unique violation with its SQLSTATE", async () => {
    const error = await Effect.runPromise(Effect.flip(
      sql.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_commit', 'x', 1, 1)")
    ))
    expect(error.code).toBe("23505")
  })
})

describe("migrations on one empty Postgres from several processes at once", () => {
  it("apply once, and none of the starters fails", async () => {
    const db = await createPostgresDatabase()
    const scope = await Effect.runPromise(Scope.make())
    try {
      // Eight starters, each with its own pool, as eight processes would have.
      const clients = await Promise.all(Array.from({ length: 8 }, async () => {
        const context = await Effect.runPromise(Layer.buildWithScope(Sql.layer({ _tag: "postgres", url: Redacted.make(db.url) }), scope))
        return Context.get(context, Sql)
      }))
      const results = await Promise.all(clients.map((client) => Effect.runPromiseExit(Effect.provideService(migrate, Sql, client))))
      expect(results.filter(Exit.isFailure)).toEqual([])
      const files = await Effect.runPromise(loadMigrations)
      const applied = results.flatMap((r) => (Exit.isSuccess(r) ? r.value : []))
      expect(applied.sort()).toEqual(files.map((f) => f.name).sort())
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await db.drop()
    }
  })
})
