import { Duration, Effect } from "effect"
import { observeMaintenance } from "../metrics.ts"
import type { SqlClient, SqlError } from "./Sql.ts"

/**
 * Autovacuum for the embedded database. PGlite runs Postgres as one single-user backend: no
 * autovacuum launcher, no background workers. Left alone, every row an update or delete leaves
 * behind stays (a device's `lastSeenAt`, the cluster's messages and leases, MQTT sessions), with
 * its index entries; the planner's statistics stay those of an empty database; and transaction
 * ids are never frozen, so after ~2 billion transactions (weeks at a few hundred commits a second)
 * Postgres would stop accepting writes to avoid wraparound.
 *
 * Every `PGLITE_MAINTENANCE_EVERY` (autovacuum's own nap, `autovacuum_naptime`), the tables that
 * autovacuum would pick, by its default thresholds, are vacuumed or analysed, one statement each:
 * - vacuum: dead rows over 50 + 20 % of the table, inserts since the last vacuum over 1,000 + 20 %
 *   (the visibility map and freezing for tables only ever appended to, such as events), or a
 *   table's oldest unfrozen transaction over 200 million old (`autovacuum_freeze_max_age`);
 * - analyse: rows changed since the last analyse over 50 + 10 %.
 *
 * PGlite runs one statement at a time, so a vacuum holds the store's other statements for its
 * length: 161 ms for a million new events, 14 ms for a devices table after 500,000 updates,
 * 253 ms to analyse a million events (bench:store's machine, 2026-11-27). The thresholds grow
 * with the table, so at a steady rate these come rarer as it grows. A database kept by a version
 * without this pass may get a first vacuum of everything it holds (as its saved counters say):
 * ~0.16 s per million events, once.
 */
export const PGLITE_MAINTENANCE_EVERY = Duration.minutes(1)

/** What a pass did to one table. */
export interface Maintained {
  readonly table: string
  readonly action: "vacuum" | "analyze"
  readonly ms: number
}

/** The tables autovacuum would pick now, with what it would do (`format('%I.%I')` quotes their names). */
const DUE = `SELECT "table", "vacuum" FROM (
    SELECT s.relid, format('%I.%I', s.schemaname, s.relname) AS "table",
      s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0)
        OR s.n_ins_since_vacuum > 1000 + 0.2 * greatest(c.reltuples, 0)
        OR age(c.relfrozenxid) > 200000000 AS "vacuum",
      s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0) AS "analyze"
    FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
  ) due
  WHERE "vacuum" OR "analyze"
  ORDER BY relid`

/** One pass: each due table vacuumed (and analysed with it) or analysed, in turn. */
export const maintainOnce = (sql: SqlClient): Effect.Effect<Array<Maintained>, SqlError> =>
  Effect.gen(function*() {
    // PGlite's backend flushes its table counters to the statistics views only now and then
    // (at most once a second, at the end of a statement); the plan needs every row counted.
    yield* sql.query("SELECT pg_stat_force_next_flush()")
    const due = yield* sql.query<{ table: string; vacuum: boolean }>(DUE)
    const done: Array<Maintained> = []
    for (const { table, vacuum } of due) {
      const started = performance.now()
      yield* sql.exec(vacuum ? `VACUUM (ANALYZE) ${table}` : `ANALYZE ${table}`)
      const ms = performance.now() - started
      const action = vacuum ? "vacuum" : "analyze"
      observeMaintenance(action, ms / 1000)
      done.push({ table, action, ms })
      yield* Effect.logDebug(`store: ${action} ${table} took ${ms.toFixed(0)} ms`)
    }
    return done
  })

/**
 * `maintainOnce` every `every`, for as long as the fiber runs (the embedded store's scope). A
 * failed pass is logged and the next one comes on time: the store may be closing, or a table
 * dropped between the plan and its vacuum.
 */
export const pgliteMaintenance = (sql: SqlClient, every: Duration.Input = PGLITE_MAINTENANCE_EVERY): Effect.Effect<never> =>
  Effect.forever(Effect.andThen(
    Effect.sleep(every),
    maintainOnce(sql).pipe(Effect.catchCause((cause) => Effect.logWarning("store: the embedded database's vacuum pass failed", cause)))
  ))
