import { Effect } from "effect"
import { lockDataDir } from "./dataDirLock.ts"
import { type EmbeddedDb, type EmbeddedQueryable, openEmbedded } from "./embedded.ts"
import { pgliteMaintenance } from "./maintenance.ts"
import { bridgeTransaction, type SqlClient, StoreUnreachable, toSqlError } from "./sqlClient.ts"

/** The embedded store: PGlite on its own thread (embedded.ts), as a `SqlClient`. */

/** PGlite reads COPY's data from a blob it names /dev/blob. */
const fromBlob = (statement: string) => statement.replace(/\bFROM\s+STDIN\s*$/i, "FROM '/dev/blob'")

const pgliteClient = (db: EmbeddedQueryable, inTransaction: boolean, root: EmbeddedDb): SqlClient => {
  const self: SqlClient = {
    dialect: "pglite",
    embedded: root,
    query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
      Effect.tryPromise({
        try: () => db.query<T>(text, params).then((r) => r.rows),
        catch: toSqlError
      }),
    exec: (text) => Effect.tryPromise({ try: () => db.exec(text).then(() => undefined), catch: toSqlError }),
    write: (text, params) => Effect.tryPromise({ try: () => db.write(text, params), catch: toSqlError }),
    transaction: (f) =>
      inTransaction
        ? f(self)
        : bridgeTransaction((body) => root.transaction((tx) => body(pgliteClient(tx, true, root))), f),
    // A COPY is a script of one statement: its data goes with it to PGlite's thread.
    copyIn: inTransaction ? (statement, text) => self.script([{ copy: statement, data: text }]) : undefined,
    script: (steps) =>
      Effect.tryPromise({
        try: () => db.script(steps.map((step) => "copy" in step ? { text: fromBlob(step.copy), blob: step.data } : step)),
        catch: toSqlError
      })
  }
  return self
}

export const openPglite = (dataDir: string | undefined, role: string) =>
  // Taken before PGlite opens the directory and released after it closes (`memory://` needs none).
  Effect.andThen(dataDir === undefined ? Effect.void : lockDataDir(dataDir, role), Effect.acquireRelease(
    Effect.tryPromise({
      // On its own thread (embedded.ts): its statements never hold up this one's event loop.
      try: () => openEmbedded(dataDir),
      catch: (cause) =>
        new StoreUnreachable({
          setting: dataDir ? "DATA_DIR" : "DATABASE_URL",
          message: `cannot open PGlite ${dataDir ? `in ${dataDir}` : "in memory"}: ${cause instanceof Error ? cause.message : String(cause)}`
        })
    }),
    (db) => Effect.promise(() => db.close()).pipe(Effect.ignore)
  )).pipe(
    Effect.map((db) => pgliteClient(db, false, db)),
    // PGlite has no autovacuum of its own (maintenance.ts); stopped before the database closes.
    Effect.tap((sql) => Effect.forkScoped(pgliteMaintenance(sql)))
  )
