import { Clock, Duration, Effect } from "effect"
import { observeMaintenance } from "../metrics.ts"
import type { SqlClient, SqlError } from "./Sql.ts"

/**
 * Autovacuum for the embedded database. PGlite runs Postgres as one single-user backend: no
 * autovacuum launcher, no background workers. Left alone, every row an update or delete leaves
 * behind stays (a device's `lastSeenAt` in `device_seen`, the cluster's messages and leases, MQTT sessions), with
 * its index entries; the planner's statistics stay those of an empty database; and transaction
 * ids are never frozen, so after ~2 billion transactions (weeks at a few hundred commits a second)
 * Postgres would stop accepting writes to avoid wraparound.
 *
 * Every `PGLITE_MAINTENANCE_EVERY` (autovacuum's own nap, `autovacuum_naptime`), the tables that
 * autovacuum would pick, by its default thresholds, are vacuumed or analysed, one statement each:
 * - vacuum: dead rows over 50 + 20 % of the table, inserts since the last vacuum over 1,000 + 20 %
 *   (the visibility map and freezing for tables only ever appended to, such as events), or a
 *   table's oldest unfrozen transaction over 200 million old (`autovacuum_freeze_max_age`);
 * - analyse: rows changed since the last analyse over 50 + 10 %, with the vacuum when both are due.
 *
 * PGlite runs one statement at a time, so a vacuum holds the store's other statements for its
 * length, where autovacuum's worker would sleep between pages (its cost delay) beside the other
 * backends. A vacuum of inserts costs what they left since the last one, and more per row the
 * longer they wait, as their pages leave PGlite's buffers (events, on disk: 10 ms for 50,000 new,
 * 50 ms for 200,000, 330 ms for 600,000). With only autovacuum's 20 %, the pass after an MQTT
 * flood vacuumed ~600,000 events in one 170-230 ms statement, which every command run and
 * acknowledgement waiting behind it took as its latency. So between those passes, every
 * `PGLITE_APPENDED_EVERY`, a table with over `INSERTS_PER_VACUUM` inserts since its vacuum is
 * vacuumed (and not analysed): events in parts of 10-60 ms during a flood (bench:ingest, timed
 * on PGlite's thread), none left for after it. That pass reads one counter per table (~1 ms)
 * and nothing else: a table of updated rows (`device_seen`, devices' `lastSeenAt`) keeps autovacuum's rhythm,
 * as its vacuum costs what its indexes hold, not what changed.
 * Analyses of events take ~20-45 ms (migrations/0017), of the other tables less.
 *
 * A beat runs one statement at most. The minute's work after a flood was four statements back
 * to back (vacuum of devices 13-25 ms, analyses of events 32-47 ms and commands 3-7 ms, vacuum
 * and analyse of command runs 13-22 ms): one 60-80 ms hold, which ~90 command runs sent at
 * 1,000/s waited out in turn, up to 62 ms each (bench:ingest's command case after its QoS 0
 * case; bench/RESULTS.md, session 34). So a pass's plan is worked through one table a beat: the
 * store is held for one statement at a time, a second apart, and what arrives meanwhile goes
 * between them. The plan is not made again until its tables are done, so none waits behind a
 * table that stays due (events in a flood). The full pass's plan includes the appended pass's
 * rule, so a flood's events are not left for the full pass's tables and its own next minute.
 */
export const PGLITE_MAINTENANCE_EVERY = Duration.minutes(1)

/** How often the tables appended to are checked for `INSERTS_PER_VACUUM`. */
export const PGLITE_APPENDED_EVERY = Duration.seconds(1)

/** The most inserts a table takes before its vacuum, whatever its size. */
export const INSERTS_PER_VACUUM = 50_000

/** What a pass did to one table. */
export interface Maintained {
  readonly table: string
  readonly action: "vacuum" | "analyze"
  readonly ms: number
}

/** `full`: autovacuum's rules; `appended`: tables over `INSERTS_PER_VACUUM` inserts since their vacuum. */
export type Pass = "full" | "appended"

/**
 * The user tables due for a vacuum or an analyse by these conditions (`format('%I.%I')` quotes
 * their names). The counters are read with the functions behind `pg_stat_user_tables`, which
 * would compute twenty of them per table (2 ms a pass instead of 0.8).
 */
const plan = (vacuum: string, analyze: string) => `SELECT "table", "vacuum", "analyze" FROM (
    SELECT c.oid, format('%I.%I', n.nspname, c.relname) AS "table", ${vacuum} AS "vacuum", ${analyze} AS "analyze"
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast'
  ) due
  WHERE "vacuum" OR "analyze"
  ORDER BY oid`

const DUE: Record<Pass, string> = {
  full: plan(
    `pg_stat_get_dead_tuples(c.oid) > 50 + 0.2 * greatest(c.reltuples, 0)
      OR pg_stat_get_ins_since_vacuum(c.oid) > least(1000 + 0.2 * greatest(c.reltuples, 0), ${INSERTS_PER_VACUUM})
      OR age(c.relfrozenxid) > 200000000`,
    "pg_stat_get_mod_since_analyze(c.oid) > 50 + 0.1 * greatest(c.reltuples, 0)"
  ),
  appended: plan(`pg_stat_get_ins_since_vacuum(c.oid) > ${INSERTS_PER_VACUUM}`, "false")
}

/** A table a pass found due, and what it is due for. */
export interface Due {
  readonly table: string
  readonly vacuum: boolean
  readonly analyze: boolean
}

/** The tables due by a pass's conditions, in the order of their creation. */
export const planPass = (sql: SqlClient, pass: Pass = "full"): Effect.Effect<ReadonlyArray<Due>, SqlError> =>
  Effect.andThen(
    // PGlite's backend flushes its table counters to the statistics views only now and then
    // (at most once a second, at the end of a statement); the plan needs every row counted.
    sql.query("SELECT pg_stat_force_next_flush()"),
    sql.query<Due>(DUE[pass])
  )

/** A due table vacuumed (analysed with it when that is due too) or analysed: one statement. */
export const maintainTable = (sql: SqlClient, { table, vacuum, analyze }: Due): Effect.Effect<Maintained, SqlError> =>
  Effect.gen(function*() {
    const started = performance.now()
    yield* sql.exec(vacuum ? (analyze ? `VACUUM (ANALYZE) ${table}` : `VACUUM ${table}`) : `ANALYZE ${table}`)
    const ms = performance.now() - started
    const action = vacuum ? "vacuum" : "analyze"
    observeMaintenance(action, ms / 1000)
    yield* Effect.logDebug(`store: ${action}${vacuum && analyze ? " (with analyze)" : ""} ${table} took ${ms.toFixed(0)} ms`)
    return { table, action, ms }
  })

/**
 * Checkpoints for the embedded database. A standalone backend has no checkpointer, and only a
 * postmaster's checkpointer acts on the WAL written: PGlite's own Postgres never checkpoints until
 * it closes. Its redo point stays where it opened, so every WAL segment written since is kept
 * (3,000,000 events: 96 segments, 1.6 GB, past `max_wal_size`'s 1 GB, and growing with every
 * event), and a crash would replay all of it on the next start.
 *
 * So the embedded store checkpoints by Postgres's own rule, read from its settings: when the WAL
 * written since the last checkpoint's redo point reaches `max_wal_size / (1 +
 * checkpoint_completion_target)` (1,024 MB / 1.9 ≈ 539 MB), or when `checkpoint_timeout` (5 min)
 * has gone by and WAL was written since. A checkpoint then recycles or removes the segments
 * before its redo point, as Postgres's does. It is immediate, not spread over the interval as the
 * checkpointer's is: it holds the store's other statements while it writes the dirty buffers and
 * syncs the files they belong to (0.2-0.4 s after 150,000 to 2,000,000 new events, on disk).
 *
 * So a checkpoint is taken where it holds nobody up when it can be: at a check that finds the
 * store idle (no WAL written since the check before, a second earlier) with `idleBytes` (64 MB) or
 * more since the redo point; and the time rule, being a bound on how old the redo point gets and
 * not on the disk, waits for such a moment up to a second `checkpoint_timeout`. Meters that report
 * together every quarter of an hour then have their checkpoint between two rounds, not during one
 * (bench:bursts). The WAL size rule still comes whenever it is due.
 */
export interface CheckpointRule {
  /** The WAL since the last checkpoint's redo point that starts one. */
  readonly walBytes: number
  /** The time after which one starts if any WAL was written: at an idle check, or after twice this at any. */
  readonly everyMs: number
  /** The WAL since the redo point that starts one at an idle check. */
  readonly idleBytes: number
}

/** The WAL since the redo point worth a checkpoint at an idle moment (four segments). */
export const IDLE_CHECKPOINT_BYTES = 64 * 1024 * 1024

/** Postgres's checkpointer's rule, from this database's settings. */
export const checkpointRule = (sql: SqlClient): Effect.Effect<CheckpointRule, SqlError> =>
  Effect.map(
    sql.query<{ walBytes: number; everyMs: number }>(`SELECT
      max(CASE WHEN name = 'max_wal_size' THEN setting::float8 * 1024 * 1024 END)
        / (1 + max(CASE WHEN name = 'checkpoint_completion_target' THEN setting::float8 END)) AS "walBytes",
      max(CASE WHEN name = 'checkpoint_timeout' THEN setting::float8 * 1000 END) AS "everyMs"
      FROM pg_settings WHERE name IN ('max_wal_size', 'checkpoint_completion_target', 'checkpoint_timeout')`),
    ([rule]) => ({ walBytes: Number(rule.walBytes), everyMs: Number(rule.everyMs), idleBytes: IDLE_CHECKPOINT_BYTES })
  )

/**
 * When the last checkpoint (or the fiber's start) was, and the WAL's insert position just after
 * it; and the position the last check saw (no WAL since: the store is idle).
 */
export interface CheckpointState {
  at: number
  lsn: string
  seen?: string
}

const WAL_POSITION = `SELECT (pg_current_wal_insert_lsn() - redo_lsn)::float8 AS "sinceRedo",
  pg_current_wal_insert_lsn()::text AS lsn FROM pg_control_checkpoint()`

/** Where the WAL is now: for a fresh `CheckpointState`. */
export const walPosition = (sql: SqlClient) =>
  Effect.map(sql.query<{ sinceRedo: number; lsn: string }>(WAL_POSITION), ([row]) => ({ sinceRedo: Number(row.sinceRedo), lsn: row.lsn }))

export interface Checkpointed {
  readonly cause: "wal" | "idle" | "time"
  /** The WAL since the previous redo point, in bytes. */
  readonly walBytes: number
  readonly ms: number
}

/** A checkpoint if the rule calls for one at `now` (ms, the state's clock); `state` moves with it. */
export const checkpointIfDue = (
  sql: SqlClient,
  rule: CheckpointRule,
  state: CheckpointState,
  now: number
): Effect.Effect<Checkpointed | undefined, SqlError> =>
  Effect.gen(function*() {
    const { sinceRedo, lsn } = yield* walPosition(sql)
    const idle = lsn === state.seen
    state.seen = lsn
    const written = lsn !== state.lsn
    const cause = sinceRedo >= rule.walBytes
      ? "wal"
      : idle && written && sinceRedo >= rule.idleBytes
      ? "idle"
      : written && now - state.at >= (idle ? rule.everyMs : 2 * rule.everyMs)
      ? "time"
      : undefined
    if (cause === undefined) return undefined
    const started = performance.now()
    yield* sql.exec("CHECKPOINT")
    const ms = performance.now() - started
    observeMaintenance("checkpoint", ms / 1000)
    state.at = now
    state.lsn = (yield* walPosition(sql)).lsn
    state.seen = state.lsn
    yield* Effect.logDebug(`store: checkpoint (${cause}, ${(sinceRedo / 1e6).toFixed(0)} MB of WAL since the last) took ${ms.toFixed(0)} ms`)
    return { cause, walBytes: sinceRedo, ms }
  })

/**
 * For as long as the fiber runs (the embedded store's scope): every `appendedEvery` one
 * statement at most, the next table of the last plan; with none left, a new plan, the full
 * pass's when `every` has gone by since the last, else the appended pass's, and its first table.
 * Then a checkpoint if `rule` (by default Postgres's, from the settings) calls for one. A failed
 * plan or statement is logged and the next beat comes on time: the store may be closing, or a
 * table dropped between the plan and its vacuum.
 */
export const pgliteMaintenance = (
  sql: SqlClient,
  every: Duration.Input = PGLITE_MAINTENANCE_EVERY,
  appendedEvery: Duration.Input = PGLITE_APPENDED_EVERY,
  rule?: CheckpointRule
): Effect.Effect<never> =>
  Effect.gen(function*() {
    const fullEvery = Duration.toMillis(every)
    let lastFull = yield* Clock.currentTimeMillis
    /** The last plan's tables not done yet, one a beat. */
    let planned: Array<Due> = []
    // Read once the first pass runs, not here: the store's first statements are its own.
    let checkpoints: { readonly rule: CheckpointRule; readonly state: CheckpointState } | undefined
    const checkpoint = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      if (checkpoints === undefined) {
        checkpoints = { rule: rule ?? (yield* checkpointRule(sql)), state: { at: now, lsn: (yield* walPosition(sql)).lsn } }
      }
      yield* checkpointIfDue(sql, checkpoints.rule, checkpoints.state, now)
    })
    const beat = Effect.gen(function*() {
      if (planned.length === 0) {
        const now = yield* Clock.currentTimeMillis
        const full = now - lastFull >= fullEvery
        if (full) lastFull = now
        planned = [...(yield* planPass(sql, full ? "full" : "appended"))]
      }
      const next = planned.shift()
      if (next !== undefined) yield* maintainTable(sql, next)
    })
    return yield* Effect.forever(Effect.gen(function*() {
      yield* Effect.sleep(appendedEvery)
      yield* beat.pipe(
        Effect.catchCause((cause) => Effect.logWarning("store: the embedded database's vacuum pass failed", cause))
      )
      yield* checkpoint.pipe(
        Effect.catchCause((cause) => Effect.logWarning("store: the embedded database's checkpoint failed", cause))
      )
    }))
  })
