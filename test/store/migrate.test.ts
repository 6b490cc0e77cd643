import { Context, Effect, Exit, Layer, Redacted, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { readFileSync } from "node:fs"
import { bucketOf } from "../../src/entities/protocol.ts"
import { loadMigrations, migrate } from "../../src/store/migrate.ts"
import { Sql, type SqlClient } from "../../src/store/Sql.ts"
import { createPostgresDatabase, openTestStore, STORE_KINDS, type TestStore } from "../support/databases.ts"

describe.each(STORE_KINDS)("the store on %s", (kind) => {
  let store: TestStore
  let sql: SqlClient
  const run = <A, E>(effect: Effect.Effect<A, E, Sql>) => Effect.runPromise(Effect.provideService(effect, Sql, sql))

  beforeAll(async () => {
    store = await openTestStore(kind, { migrated: false })
    sql = store.sql
  })
  afterAll(() => store.close())

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

  it("gives device_actors rows written before the newest bucket count the bucket bucketOf gives", async () => {
    // The statements of the last migration that fills `bucket` (0014: 64 buckets), run again over rows without one.
    const file = (await Effect.runPromise(loadMigrations)).find((f) => f.name.startsWith("0014"))
    const text = file === undefined ? "" : readFileSync(new URL(`../../migrations/${file.name}`, import.meta.url), "utf8")
    const fill = text.slice(text.indexOf("CREATE FUNCTION"), text.indexOf("DROP FUNCTION"))
    expect(fill).toContain("UPDATE device_actors SET bucket")
    const ids = ["dev_01", "x", ...Array.from({ length: 50 }, (_, i) => `dev_${i}_${"z".repeat(i % 30)}`)]
    await run(sql.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_buckets', 'x', 1, 1)"))
    await run(sql.query(
      `INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
       SELECT id, 'org_buckets', 'hash_' || id, id, 1, 1 FROM unnest($1::text[]) AS id`,
      [ids]
    ))
    await run(sql.query("INSERT INTO device_actors (device_id, snapshot, updated_at) SELECT id, '{}', 1 FROM unnest($1::text[]) AS id", [ids]))
    const cut = fill.indexOf("$$;", fill.indexOf("$$") + 2) + 2
    await run(sql.query(fill.slice(0, cut)))
    await run(sql.query(fill.slice(cut + 1)))
    await run(sql.query("DROP FUNCTION voltaic_bucket_of(text)"))
    const rows = await run(sql.query<{ device_id: string; bucket: string }>("SELECT device_id, bucket FROM device_actors WHERE device_id = ANY($1::text[])", [ids]))
    expect(rows).toHaveLength(ids.length)
    for (const row of rows) expect(row.bucket, row.device_id).toBe(bucketOf(row.device_id))
  })
})

describe.each(STORE_KINDS)("migration 0021 on a %s store at 0020", (kind) => {
  let store: TestStore
  let sql: SqlClient
  const run = <A, E>(effect: Effect.Effect<A, E, never>) => Effect.runPromise(effect)

  beforeAll(async () => {
    store = await openTestStore(kind, { migrated: false })
    sql = store.sql
  })
  afterAll(() => store.close())

  it("carries each device's lastSeenAt into device_seen, and gives a device made after it its row", async () => {
    const files = await run(loadMigrations)
    for (const file of files.filter((f) => f.version <= 20)) await run(sql.exec(file.sql))
    await run(sql.exec(`
      INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_m21', 'x', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at, last_seen_at)
        VALUES ('dev_m1', 'org_m21', 'h_m1', 'm1', 1, 1, 1795000000123), ('dev_m2', 'org_m21', 'h_m2', 'm2', 1, 1, NULL);
    `))
    const file = files.find((f) => f.version === 21)
    expect(file?.name).toBe("0021_device_seen.sql")
    await run(sql.exec(file!.sql))
    const seen = async () =>
      (await run(sql.query<{ device_id: string; last_seen_at: number | null }>("SELECT device_id, last_seen_at FROM device_seen ORDER BY device_id")))
    expect(await seen()).toEqual([{ device_id: "dev_m1", last_seen_at: 1795000000123 }, { device_id: "dev_m2", last_seen_at: null }])
    const columns = await run(sql.query("SELECT 1 FROM information_schema.columns WHERE table_name = 'devices' AND column_name = 'last_seen_at'"))
    expect(columns).toEqual([])
    await run(sql.exec("INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_m3', 'org_m21', 'h_m3', 'm3', 1, 1)"))
    await run(sql.exec("DELETE FROM devices WHERE id = 'dev_m1'"))
    expect(await seen()).toEqual([{ device_id: "dev_m2", last_seen_at: null }, { device_id: "dev_m3", last_seen_at: null }])
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
