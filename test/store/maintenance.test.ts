import { Context, Effect, Exit, Fiber, Layer, Redacted, Scope } from "effect"
import { TestClock } from "effect/testing"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { scrape } from "../../src/metrics.ts"
import { type CheckpointState, checkpointIfDue, checkpointRule, IDLE_CHECKPOINT_BYTES, INSERTS_PER_VACUUM, maintainTable, type Pass, pgliteMaintenance, planPass, walPosition } from "../../src/store/maintenance.ts"
import { migrate } from "../../src/store/migrate.ts"
import { touchDevices } from "../../src/store/devices.ts"
import { Sql, type SqlClient, SqlError } from "../../src/store/Sql.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"

const openStore = async (kind: "pglite" | "postgres") => {
  const db: TestDatabase | undefined = kind === "postgres" ? await createPostgresDatabase() : undefined
  const scope = await Effect.runPromise(Scope.make())
  const target = db ? { _tag: "postgres" as const, url: Redacted.make(db.url) } : { _tag: "pglite" as const, dataDir: undefined }
  // The store's own pass (every second) waits on a test clock that never moves: only the tests'
  // passes run, and the counters they read are theirs.
  const context = await Effect.runPromise(Layer.buildWithScope(Sql.layer(target), scope).pipe(Effect.provide(TestClock.layer())))
  const sql = Context.get(context, Sql)
  await Effect.runPromise(Effect.provideService(migrate, Sql, sql))
  return {
    sql,
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await db?.drop()
    }
  }
}

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

/** A pass's plan worked through at once: each due table in turn. */
const maintainOnce = (sql: SqlClient, pass: Pass = "full") =>
  Effect.flatMap(planPass(sql, pass), (due) => Effect.forEach(due, (table) => maintainTable(sql, table)))

describe("the embedded database's vacuum (PGlite has no autovacuum)", () => {
  let sql: SqlClient
  let close: () => Promise<void>
  const stats = async (table: string) => {
    await run(sql.query("SELECT pg_stat_force_next_flush()"))
    const [row] = await run(sql.query<{ dead: number; vacuums: number; analyses: number }>(
      `SELECT n_dead_tup::int AS dead, vacuum_count::int AS vacuums, analyze_count::int AS analyses
         FROM pg_stat_user_tables WHERE relname = $1`,
      [table]
    ))
    return row
  }

  beforeAll(async () => {
    ;({ sql, close } = await openStore("pglite"))
  })
  afterAll(() => close())

  it("vacuums a table with dead rows, analyses one only inserted into, and leaves a quiet one alone", async () => {
    await run(sql.exec(`
      CREATE TABLE churn (id int PRIMARY KEY, v int);
      INSERT INTO churn SELECT g, 0 FROM generate_series(1, 300) g;
      UPDATE churn SET v = 1;
      UPDATE churn SET v = 2;
      CREATE TABLE grown (id int PRIMARY KEY);
      INSERT INTO grown SELECT g FROM generate_series(1, 200) g;
      CREATE TABLE quiet (id int PRIMARY KEY);
      INSERT INTO quiet SELECT g FROM generate_series(1, 10) g;
    `))
    expect((await stats("churn")).dead).toBe(600)

    const done = await run(maintainOnce(sql))
    const byTable = new Map(done.map((d) => [d.table, d.action]))
    expect(byTable.get("public.churn")).toBe("vacuum")
    expect(byTable.get("public.grown")).toBe("analyze")
    expect(byTable.has("public.quiet")).toBe(false)

    expect(await stats("churn")).toMatchObject({ dead: 0, vacuums: 1, analyses: 1 })
    // Each statement is timed on the scrape: it holds PGlite's other statements for its length.
    expect(scrape()).toMatch(/^voltaic_store_maintenance_seconds_count\{action="vacuum"\} [1-9]/m)
    expect(scrape()).toMatch(/^voltaic_store_maintenance_seconds_count\{action="analyze"\} [1-9]/m)
    expect(await stats("grown")).toMatchObject({ vacuums: 0, analyses: 1 })
    expect(await stats("quiet")).toMatchObject({ vacuums: 0, analyses: 0 })
    // The planner now knows the tables' sizes (an unanalysed table has reltuples -1).
    const sizes = await run(sql.query<{ relname: string; rows: number }>(
      "SELECT relname, reltuples::int AS rows FROM pg_class WHERE relname IN ('churn', 'grown') ORDER BY relname"
    ))
    expect(sizes).toEqual([{ relname: "churn", rows: 300 }, { relname: "grown", rows: 200 }])

    // Done is done: the next pass finds nothing of these to do.
    const again = await run(maintainOnce(sql))
    expect(again.map((d) => d.table)).not.toContain("public.churn")
    expect(again.map((d) => d.table)).not.toContain("public.grown")
  })

  it("vacuums a table after 50,000 inserts between autovacuum's passes, however large, and analyses it in those passes only", async () => {
    // 300,000 rows vacuumed and analysed: autovacuum's rule would wait for 1,000 + 20 % of the table.
    await run(sql.exec(`CREATE TABLE appended (id int PRIMARY KEY, v int);
      INSERT INTO appended SELECT g, 0 FROM generate_series(1, 300000) g;`))
    // The inserts' counts reach the statistics before the vacuum resets them. A backend sends its
    // counts at most once a second: sent after the vacuum, they would count as inserted since it
    // (the pass below then saw 349,900 inserts; this failed whenever the insert and the vacuum
    // came within that second, as on a fast machine).
    await run(sql.query("SELECT pg_stat_force_next_flush()"))
    await run(sql.exec("VACUUM (ANALYZE) appended"))
    const settled = await stats("appended")
    const insert = (from: number, to: number) =>
      run(sql.exec(`INSERT INTO appended SELECT g, 0 FROM generate_series(${from}, ${to}) g`))
    const actions = async (pass: "full" | "appended") =>
      (await run(maintainOnce(sql, pass))).filter((d) => d.table === "public.appended").map((d) => d.action)

    // 49,900 new rows: under the appended pass's 50,000; over 10 % changed, so the full pass
    // analyses, but under 20 % inserted, so it does not vacuum.
    await insert(300_001, 300_000 + INSERTS_PER_VACUUM - 100)
    expect(await actions("appended")).toEqual([])
    expect(await actions("full")).toEqual(["analyze"])
    expect(await stats("appended")).toMatchObject({ vacuums: settled.vacuums, analyses: settled.analyses + 1 })

    // 1,200 more: 51,100 inserts since the vacuum, under autovacuum's 1,000 + 20 % of the table
    // (~70,000), over the appended pass's 50,000: vacuumed, not analysed.
    await insert(300_000 + INSERTS_PER_VACUUM - 99, 300_000 + INSERTS_PER_VACUUM + 1100)
    expect(await actions("appended")).toEqual(["vacuum"])
    expect(await stats("appended")).toMatchObject({ vacuums: settled.vacuums + 1, analyses: settled.analyses + 1 })
    expect(await actions("appended")).toEqual([])

    // Updated rows are autovacuum's: 75,000 dead rows (over 50 + 20 % of ~350,000) wait for the full pass.
    await run(sql.exec("UPDATE appended SET v = 1 WHERE id <= 75000"))
    expect(await actions("appended")).toEqual([])
    expect(await actions("full")).toEqual(["vacuum"])
    expect(await stats("appended")).toMatchObject({ dead: 0, vacuums: settled.vacuums + 2 })
  })

  it("quotes a table's name that needs it", async () => {
    await run(sql.exec(`CREATE TABLE "Odd Name" (id int PRIMARY KEY, v int);
      INSERT INTO "Odd Name" SELECT g, 0 FROM generate_series(1, 100) g; UPDATE "Odd Name" SET v = 1;`))
    const done = await run(maintainOnce(sql))
    expect(done).toContainEqual(expect.objectContaining({ table: `public."Odd Name"`, action: "vacuum" }))
    expect((await stats("Odd Name")).dead).toBe(0)
  })

  it("holds the store for one statement a beat: a plan's tables go one a beat, then the next plan", async () => {
    const tables = ["spread_a", "spread_b", "spread_c"]
    for (const table of tables) {
      await run(sql.exec(`CREATE TABLE ${table} (id int PRIMARY KEY, v int);
        INSERT INTO ${table} SELECT g, 0 FROM generate_series(1, 100) g; UPDATE ${table} SET v = 1;`))
    }
    // What the beats did, in order: each plan ("full" or "appended") and each statement, with its start.
    const seen: Array<{ what: string; at: number }> = []
    const recording: SqlClient = {
      ...sql,
      query: (text, params) => {
        if (text.includes("pg_stat_get_ins_since_vacuum")) {
          seen.push({ what: text.includes("pg_stat_get_dead_tuples") ? "full" : "appended", at: performance.now() })
        }
        return sql.query(text, params)
      },
      exec: (text) => {
        if (/^(VACUUM|ANALYZE)/.test(text)) seen.push({ what: text, at: performance.now() })
        return sql.exec(text)
      }
    }
    // The full pass's minute is 200 ms here, its beat 40 ms.
    const fiber = Effect.runFork(pgliteMaintenance(recording, "200 millis", "40 millis"))
    try {
      const deadline = Date.now() + 20_000
      const vacuumed = async () => (await Promise.all(tables.map(stats))).every((s) => s.dead === 0)
      while (!(await vacuumed()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
      expect(await vacuumed()).toBe(true)
    } finally {
      await run(Fiber.interrupt(fiber))
    }
    const statements = seen.filter((s) => s.what !== "full" && s.what !== "appended")
    // All three from one full plan, made once: the plans before it were the appended pass's.
    const ours = statements.filter((s) => tables.some((t) => s.what === `VACUUM (ANALYZE) public.${t}`))
    expect(ours).toHaveLength(3)
    const fullPlans = seen.filter((s) => s.what === "full" && s.at < ours[2].at)
    expect(fullPlans).toHaveLength(1)
    expect(seen.filter((s) => s.what === "appended" && s.at < fullPlans[0].at).length).toBeGreaterThanOrEqual(1)
    // No plan between them, and never two statements in one beat: a beat's sleep (40 ms) lies between any two.
    expect(seen.filter((s) => s.at > ours[0].at && s.at < ours[2].at).map((s) => s.what)).toEqual([ours[1].what])
    for (let i = 1; i < statements.length; i++) {
      expect(statements[i].at - statements[i - 1].at, `${statements[i].what} after ${statements[i - 1].what}`).toBeGreaterThanOrEqual(39)
    }
  })

  it("runs a pass on every beat, and one that fails does not stop the next", async () => {
    await run(sql.exec(`CREATE TABLE beat (id int PRIMARY KEY, v int);
      INSERT INTO beat SELECT g, 0 FROM generate_series(1, 100) g; UPDATE beat SET v = 1;`))
    let plans = 0
    // The first pass's plan fails, as when the store is closing under it.
    const failingOnce: SqlClient = {
      ...sql,
      query: (text, params) => {
        if (text.includes("pg_stat_get_dead_tuples")) {
          plans++
          if (plans === 1) return Effect.fail(new SqlError({ message: "the embedded database is closed", cause: undefined }))
        }
        return sql.query(text, params)
      }
    }
    const fiber = Effect.runFork(pgliteMaintenance(failingOnce, "20 millis", "20 millis"))
    try {
      const deadline = Date.now() + 20_000
      while ((await stats("beat")).vacuums === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
      expect(plans).toBeGreaterThanOrEqual(2)
      expect(await stats("beat")).toMatchObject({ dead: 0, vacuums: 1 })
    } finally {
      await run(Fiber.interrupt(fiber))
    }
  })
})

const GB = 1024 * 1024 * 1024

describe("the embedded database's checkpoints (PGlite has no checkpointer)", () => {
  let sql: SqlClient
  let close: () => Promise<void>
  beforeAll(async () => {
    ;({ sql, close } = await openStore("pglite"))
  })
  afterAll(() => close())

  const redo = async () =>
    (await run(sql.query<{ file: string }>("SELECT pg_walfile_name(redo_lsn) AS file FROM pg_control_checkpoint()")))[0].file
  const segments = async () =>
    (await run(sql.query<{ name: string }>("SELECT name FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$' ORDER BY name"))).map((r) => r.name)
  /** ~`mb` MB of WAL: rows of 1,000 characters. */
  const writeWal = (mb: number) => run(sql.exec(`CREATE TABLE IF NOT EXISTS filler (v text);
    INSERT INTO filler SELECT repeat(md5(g::text), 32) FROM generate_series(1, ${mb * 1000}) g`))

  it("follows Postgres's checkpointer: its settings give the WAL size and the time that start one", async () => {
    // Postgres's defaults: max_wal_size 1 GB over (1 + checkpoint_completion_target 0.9), checkpoint_timeout 5 min.
    const rule = await run(checkpointRule(sql))
    expect(rule.walBytes).toBeCloseTo((1024 * 1024 * 1024) / 1.9, -3)
    expect(rule.everyMs).toBe(300_000)
    expect(rule.idleBytes).toBe(IDLE_CHECKPOINT_BYTES)
  })

  it("checkpoints once the WAL since the redo point reaches the rule's size, and the segments before it go", async () => {
    const rule = { walBytes: 16 * 1024 * 1024, everyMs: 60_000, idleBytes: GB }
    const state = { at: 0, lsn: (await run(walPosition(sql))).lsn }
    // Left alone, the redo point stays where the store opened and every segment since is kept.
    const before = await redo()
    await writeWal(40)
    expect(await redo()).toBe(before)
    const kept = await segments()
    expect(kept.filter((name) => name >= before).length).toBeGreaterThanOrEqual(3)

    const done = await run(checkpointIfDue(sql, rule, state, 0))
    expect(done).toMatchObject({ cause: "wal" })
    expect(done!.walBytes).toBeGreaterThanOrEqual(rule.walBytes)
    const after = await redo()
    expect(after > before).toBe(true)
    // Segments before the new redo point were there and are gone (recycled ones take later names).
    expect(kept.some((name) => name < after)).toBe(true)
    expect((await segments()).every((name) => name >= after)).toBe(true)
    expect(scrape()).toMatch(/^voltaic_store_maintenance_seconds_count\{action="checkpoint"\} [1-9]/m)
    // Nothing more is due right after it.
    expect(await run(checkpointIfDue(sql, rule, state, 0))).toBeUndefined()
  })

  it("checkpoints after the rule's time if WAL was written since the last one: at an idle check, or at twice the time", async () => {
    const rule = { walBytes: GB, everyMs: 60_000, idleBytes: GB }
    const state: CheckpointState = { at: 0, lsn: "" }
    const check = (now: number) => run(checkpointIfDue(sql, rule, state, now))
    const one = () => run(sql.exec("INSERT INTO filler VALUES ('one more')"))
    await writeWal(1)
    // The first check cannot tell whether the store is idle (nothing seen before it).
    expect(await check(60_000)).toBeUndefined()
    // A second later, nothing written meanwhile: idle, and the time has come.
    expect(await check(61_000)).toMatchObject({ cause: "time" })
    const after = await redo()
    // Time again, nothing written: nothing to do.
    expect(await check(121_000)).toBeUndefined()
    expect(await redo()).toBe(after)
    // Written to before every check: the time waits for an idle one, up to twice the time.
    await one()
    expect(await check(121_001)).toBeUndefined()
    await one()
    expect(await check(180_999)).toBeUndefined()
    await one()
    expect(await check(181_000)).toMatchObject({ cause: "time" })
    // A write, then idle checks: nothing before the time, a checkpoint at it.
    await one()
    expect(await check(181_500)).toBeUndefined()
    expect(await check(240_999)).toBeUndefined()
    expect(await check(241_000)).toMatchObject({ cause: "time" })
  })

  it("checkpoints at an idle check once the WAL since the redo point reaches the idle size, never while written to", async () => {
    const rule = { walBytes: GB, everyMs: 3_600_000, idleBytes: 8 * 1024 * 1024 }
    const state: CheckpointState = { at: 0, lsn: (await run(walPosition(sql))).lsn }
    const check = (now: number) => run(checkpointIfDue(sql, rule, state, now))
    await writeWal(12)
    // The first check: written since the last look.
    expect(await check(1_000)).toBeUndefined()
    await writeWal(1)
    expect(await check(2_000)).toBeUndefined()
    const before = await redo()
    // A second with nothing written: the checkpoint.
    const done = await check(3_000)
    expect(done).toMatchObject({ cause: "idle" })
    expect(done!.walBytes).toBeGreaterThanOrEqual(rule.idleBytes)
    expect(await redo() > before).toBe(true)
    // Idle again with little written since: nothing.
    await writeWal(1)
    expect(await check(4_000)).toBeUndefined()
    expect(await check(5_000)).toBeUndefined()
  })

  it("checkpoints from the store's maintenance fiber", async () => {
    const before = await redo()
    await writeWal(20)
    const fiber = Effect.runFork(pgliteMaintenance(sql, "1 hour", "20 millis", { walBytes: 16 * 1024 * 1024, everyMs: 3_600_000, idleBytes: GB }))
    try {
      const deadline = Date.now() + 20_000
      while ((await redo()) === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
      expect(await redo() > before).toBe(true)
    } finally {
      await run(Fiber.interrupt(fiber))
    }
  })
})

describe("every embedded store", () => {
  it("vacuums a table's 50,000 inserts a second on, and the rest of what autovacuum would a minute on, not before", async () => {
    const vacuums = (sql: SqlClient, table: string) =>
      Effect.andThen(
        sql.query("SELECT pg_stat_force_next_flush()"),
        sql.query<{ n: number }>("SELECT vacuum_count::int AS n FROM pg_stat_user_tables WHERE relname = $1", [table])
      ).pipe(Effect.map(([row]) => row.n))
    const counts = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const sql = Context.get(yield* Layer.build(Sql.layer({ _tag: "pglite", dataDir: undefined })), Sql)
      yield* sql.exec(`CREATE TABLE aging (id int PRIMARY KEY, v int);
        INSERT INTO aging SELECT g, 0 FROM generate_series(1, 100) g; UPDATE aging SET v = 1;
        CREATE TABLE flooded (id int PRIMARY KEY);
        INSERT INTO flooded SELECT g FROM generate_series(1, ${INSERTS_PER_VACUUM + 100}) g;`)
      // Each pass is real work on PGlite's thread: the test clock moves once the last one is over.
      const settle = TestClock.withLive(Effect.sleep("300 millis"))
      yield* TestClock.adjust("1 second")
      let flooded = yield* vacuums(sql, "flooded")
      for (let i = 0; i < 500 && flooded === 0; i++) {
        yield* TestClock.withLive(Effect.sleep("20 millis"))
        flooded = yield* vacuums(sql, "flooded")
      }
      yield* settle
      const atOneSecond = yield* vacuums(sql, "aging")
      yield* TestClock.adjust("58 seconds")
      yield* settle
      const before = yield* vacuums(sql, "aging")
      yield* TestClock.adjust("1 second")
      let after = yield* vacuums(sql, "aging")
      for (let i = 0; i < 500 && after === 0; i++) {
        yield* TestClock.withLive(Effect.sleep("20 millis"))
        after = yield* vacuums(sql, "aging")
      }
      return { flooded, atOneSecond, before, after }
    })).pipe(Effect.provide(TestClock.layer())))
    expect(counts).toEqual({ flooded: 1, atOneSecond: 0, before: 0, after: 1 })
  })
})

describe.each(STORE_KINDS)("the storage settings of migrations 0015, 0017 and 0018 on %s", (kind) => {
  let sql: SqlClient
  let close: () => Promise<void>
  beforeAll(async () => {
    ;({ sql, close } = await openStore(kind))
  })
  afterAll(() => close())

  /** Each query's plan as `EXPLAIN (COSTS OFF)` prints it. */
  const plansOf = async (queries: ReadonlyArray<string>) => {
    const out: Array<string> = []
    for (const query of queries) {
      out.push((await run(sql.query<Record<string, string>>(`EXPLAIN (COSTS OFF) ${query}`))).map((row) => Object.values(row)[0]).join("\n"))
    }
    return out
  }

  it("device_seen's pages keep room to move lastSeenAt in place: after a few touches, a touch of every device moves no row off its page", async () => {
    // Postgres's autovacuum left out of this table while the test runs: an autoanalyze of it (400
    // new rows, then 400 updated at each touch) holds a snapshot, and while it does no touch may
    // prune the old versions, so rows move for as long as it runs (one run of the whole suite:
    // 123, 72 and 29 rows moved by the last three touches). The room the pages keep is what this tests.
    await run(sql.exec("ALTER TABLE device_seen SET (autovacuum_enabled = false)"))
    await run(sql.exec(`
      INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_ff', 'ff', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
        SELECT 'dev_ff' || lpad(g::text, 4, '0'), 'org_ff', 'hash-ff-' || g, 'device ' || g, 1, 1 FROM generate_series(1, 400) g;
    `))
    const pages = async () =>
      new Map((await run(sql.query<{ id: string; page: string }>("SELECT device_id AS id, (ctid::text::point)[0]::text AS page FROM device_seen WHERE device_id LIKE 'dev_ff%'")))
        .map((r) => [r.id, r.page]))
    let before = await pages()
    expect(before.size).toBe(400)
    const ids = [...before.keys()]
    // Rows moved off their page by each touch of all 400 devices (one statement, as a batch's). A
    // statement cannot reuse the room its own old versions take, so the first touches spread the
    // rows; then every touch is in place. With full pages (fillfactor 100) rows would move on
    // every touch, however many came before, each adding an entry to the index.
    const moved: Array<number> = []
    for (let at = 1; at <= 10; at++) {
      await run(touchDevices(sql, new Map(ids.map((id) => [id, at]))))
      const after = await pages()
      moved.push(ids.filter((id) => after.get(id) !== before.get(id)).length)
      before = after
    }
    expect(moved.slice(-3)).toEqual([0, 0, 0])
    const [seen] = await run(sql.query<{ n: number }>("SELECT count(*)::int AS n FROM device_seen WHERE device_id LIKE 'dev_ff%' AND last_seen_at = 10"))
    expect(seen.n).toBe(400)
    await run(sql.exec("ALTER TABLE device_seen RESET (autovacuum_enabled)"))
  })

  it("events' statistics are taken from a 3,000-row sample, none for the columns never filtered on, and give GET /events the plans of the default", async () => {
    await run(sql.exec(`
      INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_st', 'st', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
        SELECT 'dev_st' || g, 'org_st', 'hash-st-' || g, 'device ' || g, 1, 1 FROM generate_series(1, 20) g;
      INSERT INTO events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol)
        SELECT 'evt_st' || lpad(g::text, 6, '0'), 'org_st', 'dev_st' || (g % 20 + 1), (ARRAY['power', 'humidity', 'door'])[g % 3 + 1],
          jsonb_build_object('value', g % 400), 1700000000000 + g, 1700000000000 + g, 'mqtt'
        FROM generate_series(1, 60000) g;
    `))
    // 3,000 events a device, 1,000 a device and name: a page of 101 is a small part of either, so
    // each query's plan is clear of the point where a sampled estimate's noise could tip it (at
    // 200 a device, a page of 101 was half of it, and a 3,000-row sample's estimate once chose a
    // sort of the device's rows over the index for the default targets' plan, or the reverse).
    const queries = [
      "SELECT e.id FROM events e WHERE e.organisation_id = 'org_st' AND e.device_id = 'dev_st7' ORDER BY e.timestamp DESC, e.id DESC LIMIT 101",
      "SELECT e.id FROM events e WHERE e.organisation_id = 'org_st' AND e.device_id = 'dev_st7' AND e.name = 'power' AND e.timestamp > 1700000010000 ORDER BY e.timestamp, e.id LIMIT 101",
      "SELECT count(*) FROM events e WHERE e.organisation_id = 'org_st' AND e.device_id = 'dev_st7'",
      "SELECT e.id FROM events e WHERE e.organisation_id = 'org_st' AND e.name = 'door' ORDER BY e.timestamp DESC, e.id DESC LIMIT 101"
    ]
    const plans = () => plansOf(queries)
    const targets = await run(sql.query<{ attname: string; target: number }>(
      "SELECT attname, attstattarget::int AS target FROM pg_attribute WHERE attrelid = 'events'::regclass AND attnum > 0 AND NOT attisdropped AND attstattarget IS NOT NULL AND attstattarget >= 0"
    ))
    expect(targets.length).toBe(9)
    await run(sql.exec("ANALYZE events"))
    const columns = await run(sql.query<{ attname: string; buckets: number | null; common: number | null }>(
      `SELECT attname, array_length(histogram_bounds::text::text[], 1) AS buckets, array_length(most_common_vals::text::text[], 1) AS common
         FROM pg_stats WHERE tablename = 'events' ORDER BY attname`
    ))
    expect(columns.map((c) => c.attname)).toEqual(["device_id", "has_file", "name", "organisation_id", "timestamp"])
    // A target of 10: at most 11 histogram bounds and 10 common values (101 and 100 at the default).
    expect(Math.max(...columns.map((c) => c.buckets ?? 0))).toBeGreaterThan(1)
    for (const c of columns) {
      expect(c.buckets ?? 0).toBeLessThanOrEqual(11)
      expect(c.common ?? 0).toBeLessThanOrEqual(10)
    }
    const atMigrated = await plans()
    // The same queries planned from the default targets' statistics (-1), taken afresh.
    await run(sql.exec(`ALTER TABLE events ${targets.map((t) => `ALTER COLUMN ${t.attname} SET STATISTICS -1`).join(", ")}; ANALYZE events;`))
    expect(await plans()).toEqual(atMigrated)
    expect(atMigrated[0]).toMatch(/events_device_(name_)?time/)
  })

  it("migration 0018: command runs', locations' and energy readings' statistics only for the columns read by, and GET /locations keeps the default's plans", async () => {
    await run(sql.exec(`
      INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_sl', 'sl', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
        SELECT 'dev_sl' || g, 'org_sl', 'hash-sl-' || g, 'device ' || g, 1, 1 FROM generate_series(1, 20) g;
      INSERT INTO commands (id, organisation_id, device_id, name, slug, created_at, updated_at)
        SELECT 'cmd_sl' || g, 'org_sl', 'dev_sl' || g, 'ping', 'ping', 1, 1 FROM generate_series(1, 20) g;
      INSERT INTO command_runs (id, organisation_id, command_id, device_id, data, timestamp, protocol)
        SELECT 'run_sl' || lpad(g::text, 6, '0'), 'org_sl', 'cmd_sl' || (g % 20 + 1), 'dev_sl' || (g % 20 + 1), jsonb_build_object('n', g), 1700000000000 + g, 'mqtt'
        FROM generate_series(1, 20000) g;
      INSERT INTO locations (id, organisation_id, device_id, latitude, longitude, altitude, timestamp, received_at, protocol)
        SELECT 'loc_sl' || lpad(g::text, 6, '0'), 'org_sl', 'dev_sl' || (g % 20 + 1), 52 + (g % 1000) / 1000.0, 4 + (g % 700) / 1000.0, NULL,
          1700000000000 + g, 1700000000000 + g, 'mqtt'
        FROM generate_series(1, 60000) g;
      INSERT INTO energy_series (organisation_id, kind, level, space_id, device_id, source, flow)
        SELECT 'org_sl', 'electricity', 'device', '', 'dev_sl' || g, 'grid', 'import' FROM generate_series(1, 20) g;
      INSERT INTO energy_readings (timestamp, series_id, quantity)
        SELECT 1700000000000 + g * 1000, s.id, (g % 97) / 10.0 FROM generate_series(1, 1000) g, energy_series s WHERE s.organisation_id = 'org_sl';
      ANALYZE command_runs;
      ANALYZE locations;
      ANALYZE energy_readings;
    `))
    const stats = async (table: string) =>
      await run(sql.query<{ attname: string; buckets: number | null; common: number | null }>(
        `SELECT attname, array_length(histogram_bounds::text::text[], 1) AS buckets, array_length(most_common_vals::text::text[], 1) AS common
           FROM pg_stats WHERE tablename = $1 ORDER BY attname`,
        [table]
      ))
    const runs = await stats("command_runs")
    expect(runs.map((c) => c.attname)).toEqual(["command_id", "device_id", "organisation_id", "timestamp"])
    const locations = await stats("locations")
    expect(locations.map((c) => c.attname)).toEqual(["device_id", "organisation_id", "timestamp"])
    // A target of 10: at most 11 histogram bounds and 10 common values.
    for (const c of [...runs, ...locations]) {
      expect(c.buckets ?? 0).toBeLessThanOrEqual(11)
      expect(c.common ?? 0).toBeLessThanOrEqual(10)
    }
    expect(Math.max(...locations.map((c) => c.buckets ?? 0))).toBeGreaterThan(1)
    const readings = await stats("energy_readings")
    expect(readings.map((c) => c.attname)).toEqual(["series_id", "timestamp"])
    // Read by series and time range on 100 million rows: the default target (up to 101 bounds) stays.
    expect(readings.find((c) => c.attname === "timestamp")?.buckets).toBeGreaterThan(11)

    const queries = [
      "SELECT l.id FROM locations l WHERE l.organisation_id = 'org_sl' AND l.device_id = 'dev_sl7' ORDER BY l.timestamp DESC, l.id DESC LIMIT 101",
      "SELECT l.id FROM locations l WHERE l.organisation_id = 'org_sl' AND l.device_id = 'dev_sl7' AND l.timestamp > 1700000010000 ORDER BY l.timestamp, l.id LIMIT 101",
      "SELECT count(*) FROM locations l WHERE l.organisation_id = 'org_sl' AND l.device_id = 'dev_sl7'",
      "DELETE FROM command_runs WHERE command_id = 'cmd_sl3'"
    ]
    const plans = () => plansOf(queries)
    const atMigrated = await plans()
    const reset = (table: string, columns: ReadonlyArray<string>) =>
      `ALTER TABLE ${table} ${columns.map((c) => `ALTER COLUMN ${c} SET STATISTICS -1`).join(", ")}; ANALYZE ${table};`
    await run(sql.exec(
      reset("locations", ["id", "latitude", "longitude", "altitude", "received_at", "protocol", "organisation_id", "device_id", "timestamp"]) +
        reset("command_runs", ["id", "data", "protocol", "organisation_id", "command_id", "device_id", "timestamp"])
    ))
    expect(await plans()).toEqual(atMigrated)
    expect(atMigrated[0]).toMatch(/locations_device_time/)
    expect(atMigrated[3]).toMatch(/command_runs_command_time/)
  })
})
