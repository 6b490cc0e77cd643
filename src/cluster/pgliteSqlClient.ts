import { makeCompiler } from "@effect/sql-pg/PgClient"
import { Context, Effect, Layer, Stream } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import type { Connection } from "effect/sql/SqlConnection"
import type { SqlError } from "effect/sql/SqlError"
import type { EmbeddedDb, EmbeddedQueryable } from "../store/embedded.ts"
import { commit, toSqlError } from "./sqlErrors.ts"

const connectionOf = (db: EmbeddedQueryable): Connection => {
  const rows = (operation: string, sql: string, params: ReadonlyArray<unknown>) =>
    Effect.tryPromise({
      try: () => db.query<Record<string, unknown>>(sql, [...params]).then((r) => r.rows),
      catch: toSqlError(operation)
    })
  const values = (sql: string, params: ReadonlyArray<unknown>) =>
    Effect.tryPromise({
      try: () => db.query<Array<unknown>>(sql, [...params], { rowMode: "array" }).then((r) => r.rows),
      catch: toSqlError("executeValues")
    })
  const transformed = (operation: string) =>
  (
    sql: string,
    params: ReadonlyArray<unknown>,
    transformRows: (<A extends object>(row: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined
  ) => transformRows ? Effect.map(rows(operation, sql, params), transformRows) : rows(operation, sql, params)
  return {
    execute: transformed("execute"),
    executeUnprepared: transformed("executeUnprepared"),
    executeRaw: (sql, params) =>
      Effect.tryPromise({ try: () => db.query(sql, [...params]), catch: toSqlError("executeRaw") }),
    executeValues: values,
    executeValuesUnprepared: values,
    executeStream: (sql, params, transformRows) => Stream.fromArrayEffect(transformed("executeStream")(sql, params, transformRows))
  }
}

/** Opens `PGlite.transaction` and keeps it open until the scope closes; the client sends BEGIN/COMMIT/ROLLBACK in it. */
const holdTransaction = (pglite: EmbeddedDb) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly tx: EmbeddedQueryable; readonly done: () => void }, SqlError>((resume) => {
      let release!: () => void
      const finished = new Promise<void>((resolve) => {
        release = resolve
      })
      pglite
        .transaction((tx) => {
          resume(Effect.succeed({ tx, done: release }))
          return finished
        })
        // The client ended the transaction itself; PGlite's own COMMIT then only warns.
        .catch((cause) => resume(Effect.fail(toSqlError("transaction")(cause))))
    }),
    ({ done }) => Effect.sync(done)
  ).pipe(Effect.map(({ tx }) => connectionOf(tx)))

/**
 * An `effect/sql` `SqlClient` over the project's PGlite instance, for `effect/cluster`'s SQL storage.
 *
 * `@effect/sql-pglite` (4.0.0-beta.93, the newest) imports `effect/unstable/*`, which effect 4.1 no
 * longer exports, and sets no `driver`; `SqlRunnerStorage` needs `driver: "pglite"` to use lease rows
 * instead of advisory locks on a reserved connection (PGlite has one session).
 *
 * PGlite runs one statement at a time and `PGlite.query` waits for an open `PGlite.transaction`, so a
 * transaction of this client is a `PGlite.transaction` held open for the scope: nothing else (the
 * project's own `Sql` service included) runs inside it.
 */
export const makePgliteSqlClient = Effect.fnUntraced(function*(pglite: EmbeddedDb) {
  const client = yield* SqlClient.make({
    acquirer: Effect.succeed(connectionOf(pglite)),
    transactionAcquirer: holdTransaction(pglite),
    compiler: makeCompiler(),
    driver: "pglite",
    // PGlite has already sent BEGIN when `holdTransaction` hands the connection over.
    beginTransaction: "SELECT 1",
    commit,
    spanAttributes: [["db.system.name", "postgresql"]]
  })
  return client
})

/** `SqlClient` for the cluster over an open PGlite (the store's embedded database). */
export const layerPglite = (pglite: EmbeddedDb): Layer.Layer<SqlClient.SqlClient> =>
  Layer.effectContext(
    Effect.map(makePgliteSqlClient(pglite), (client) => Context.make(SqlClient.SqlClient, client))
  ).pipe(Layer.provide(Reactivity.layer))
