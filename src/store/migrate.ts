import { Effect } from "effect"
import { readdir, readFile } from "node:fs/promises"
import { fileURLToPath } from "node:url"
import { Sql, SqlError } from "./Sql.ts"

const MIGRATIONS_DIR = fileURLToPath(new URL("../../migrations/", import.meta.url))

/** Any constant shared by every process: serialises concurrent starts on one Postgres. */
const MIGRATION_LOCK = 7_215_031

export interface Migration {
  readonly version: number
  readonly name: string
  readonly sql: string
}

export const loadMigrations = Effect.tryPromise({
  try: async (): Promise<Array<Migration>> => {
    const files = (await readdir(MIGRATIONS_DIR)).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort()
    return Promise.all(files.map(async (file) => ({
      version: Number(file.slice(0, 4)),
      name: file,
      sql: await readFile(MIGRATIONS_DIR + file, "utf8")
    })))
  },
  catch: (cause) => new SqlError({ message: `cannot read ${MIGRATIONS_DIR}`, cause })
})

/**
 * Applies each numbered file of `migrations/` exactly once, in order, each in its own
 * transaction, recorded in `schema_migrations`, then (PGlite on disk) gives indexes without a
 * free-space map an empty one. Returns the names applied now.
 */
export const migrate = Effect.gen(function*() {
  const sql = yield* Sql
  const migrations = yield* loadMigrations
  // Under the lock too: two processes starting at once on an empty Postgres both saw the table
  // missing and one failed (`type "schema_migrations" already exists`).
  yield* sql.transaction((tx) =>
    Effect.andThen(
      tx.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK]),
      tx.exec("CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)")
    )
  )
  const applied: Array<string> = []
  for (const migration of migrations) {
    const done = yield* sql.transaction((tx) =>
      Effect.gen(function*() {
        yield* tx.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK])
        const rows = yield* tx.query("SELECT 1 FROM schema_migrations WHERE version = $1", [migration.version])
        if (rows.length > 0) return false
        yield* tx.exec(migration.sql)
        yield* tx.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)", [
          migration.version,
          migration.name,
          Date.now()
        ])
        return true
      })
    )
    if (done) applied.push(migration.name)
  }
  // PGlite on disk: the indexes, the migrations' new ones too, get free-space maps (pgliteWorker.ts),
  // which only spare its thread work: a failure is reported, not fatal.
  const embedded = sql.embedded
  if (embedded !== undefined) {
    yield* Effect.tryPromise(() => embedded.freeSpaceMaps()).pipe(
      Effect.catchCause((cause) => Effect.logWarning("store: the indexes' free-space maps were not made", cause))
    )
  }
  return applied
})
