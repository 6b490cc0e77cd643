import { Effect, ManagedRuntime } from "effect"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type EmbeddedDb, openEmbedded } from "../../src/store/embedded.ts"
import { migrate } from "../../src/store/migrate.ts"
import { Sql } from "../../src/store/Sql.ts"

let root: string
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "voltaic-fsm-"))
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

/** Permanent btree indexes whose free-space map fork is empty or missing (`pg_relation_size` 0 either way). */
const WITHOUT_MAP = `SELECT c.relname FROM pg_class c JOIN pg_am am ON am.oid = c.relam
  WHERE c.relkind = 'i' AND am.amname = 'btree' AND c.relpersistence = 'p' AND pg_relation_size(c.oid, 'fsm') = 0
  ORDER BY 1`

const mapBytes = async (db: EmbeddedDb, index: string) =>
  (await db.query<{ bytes: number }>("SELECT pg_relation_size($1::regclass, 'fsm')::int AS bytes", [index])).rows[0].bytes

describe("free-space maps for btree indexes (PGlite on disk)", () => {
  it("are made by migrate for every index, the migrations' own and the catalogues'", async () => {
    const dataDir = join(root, "migrated")
    const runtime = ManagedRuntime.make(Sql.layer({ _tag: "pglite", dataDir }, "test"))
    try {
      const sql = await runtime.runPromise(Effect.service(Sql))
      const indexes = (name: string) => sql.query<{ relname: string }>(name)
      // A new database: Postgres gives no index a map until VACUUM frees one of its pages.
      expect((await runtime.runPromise(indexes(WITHOUT_MAP))).map((r) => r.relname)).toContain("pg_class_oid_index")
      await runtime.runPromise(migrate)
      expect(await runtime.runPromise(indexes(WITHOUT_MAP))).toEqual([])
      const [{ n }] = await runtime.runPromise(sql.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_class c WHERE c.relkind = 'i' AND pg_relation_size(c.oid, 'fsm') = 8192 AND c.relname IN ('events_pkey', 'events_device_time', 'events_device_name_time', 'devices_pkey')"
      ))
      expect(n).toBe(4)
    } finally {
      await runtime.dispose()
    }
  })

  it("are made once, for new and rewritten indexes only, and never over a map Postgres made", async () => {
    const db = await openEmbedded(join(root, "direct"))
    try {
      const first = await db.freeSpaceMaps()
      expect(first).toBeGreaterThan(100)
      expect(await db.freeSpaceMaps()).toBe(0)
      await db.exec("CREATE TABLE readings (id int8 PRIMARY KEY, device text NOT NULL, at int8 NOT NULL)")
      await db.exec("CREATE INDEX readings_device_at ON readings (device, at)")
      // The table's primary key, its TOAST table's index (for `device`) and the new index.
      expect(await db.freeSpaceMaps()).toBe(3)
      expect(await mapBytes(db, "readings_device_at")).toBe(8192)
      // A rewrite gives the index a new file, without a map until the next call.
      await db.exec("REINDEX INDEX readings_device_at")
      expect(await mapBytes(db, "readings_device_at")).toBe(0)
      expect(await db.freeSpaceMaps()).toBe(1)

      // The map works as one Postgres made: VACUUM records the pages it frees in it (extending
      // it past the one page given), and later inserts reuse them instead of growing the index.
      await db.exec("INSERT INTO readings SELECT n, 'dev-' || (n % 10), n FROM generate_series(1, 60000) AS n")
      await db.exec("DELETE FROM readings WHERE id > 1000")
      await db.exec("VACUUM readings")
      await db.exec("VACUUM readings")
      const recorded = await mapBytes(db, "readings_device_at")
      expect(recorded).toBeGreaterThan(8192)
      const size = async () => (await db.query<{ bytes: number }>("SELECT pg_relation_size('readings_device_at')::int AS bytes")).rows[0].bytes
      const before = await size()
      await db.exec("INSERT INTO readings SELECT n, 'dev-' || (n % 10), n FROM generate_series(1001, 30000) AS n")
      expect(await size()).toBe(before)
      // A map Postgres grew is left as it is.
      expect(await db.freeSpaceMaps()).toBe(0)
      expect(await mapBytes(db, "readings_device_at")).toBe(recorded)
      expect((await db.query<{ n: number }>("SELECT count(*)::int AS n FROM readings WHERE device = 'dev-3'")).rows).toEqual([{ n: 3000 }])
    } finally {
      await db.close()
    }
  })

  it("are not made in memory (no data directory on disk to hold them)", async () => {
    const db = await openEmbedded(undefined)
    try {
      expect(await db.freeSpaceMaps()).toBe(0)
    } finally {
      await db.close()
    }
  })
})
