import { PGlite } from "@electric-sql/pglite"
import { Context, Effect, Exit, Layer, Redacted, Schema } from "effect"
import postgres from "postgres"
import type { DatabaseTarget } from "../config.ts"
import { lockDataDir } from "./dataDirLock.ts"

export type Row = Record<string, unknown>

/** A failed statement. `code` is the SQLSTATE when the server gave one. */
export class SqlError extends Schema.TaggedError<SqlError>()("SqlError", {
  code: Schema.optional(Schema.String),
  message: Schema.String,
  cause: Schema.Defect()
}) {}

/** Raised at start when the configured database cannot be opened. */
export class StoreUnreachable extends Schema.TaggedError<StoreUnreachable>()("StoreUnreachable", {
  setting: Schema.String,
  message: Schema.String
}) {}

export interface SqlClient {
  readonly dialect: "pglite" | "postgres"
  /** One parameterised statement ($1, $2…). */
  query<T = Row>(text: string, params?: ReadonlyArray<unknown>): Effect.Effect<Array<T>, SqlError>
  /** Several statements without parameters (migrations). */
  exec(text: string): Effect.Effect<void, SqlError>
  /** Runs `f` in one transaction; any failure or defect of `f` rolls it back. */
  transaction<A, E, R>(f: (tx: SqlClient) => Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R>
}

const toSqlError = (cause: unknown): SqlError => {
  const code = typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string"
    ? cause.code
    : undefined
  const message = cause instanceof Error ? cause.message : String(cause)
  return new SqlError({ code, message, cause })
}

/** Carries a failed Exit of the inner effect through the driver's promise-based transaction. */
class Rollback {
  constructor(readonly exit: Exit.Exit<unknown, unknown>) {}
}

/**
 * Bridges an Effect body into a driver's `begin(async tx => …)`: the body runs with the
 * caller's services, and its failure rolls back and is re-raised unchanged.
 */
const bridgeTransaction = <A, E, R>(
  begin: (body: (tx: SqlClient) => Promise<A>) => Promise<A>,
  f: (tx: SqlClient) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R> =>
  Effect.flatMap(Effect.context<R>(), (context) =>
    Effect.flatten(
      Effect.tryPromise({
        try: () =>
          begin(async (tx) => {
            const exit = await Effect.runPromiseExit(Effect.provideContext(f(tx), context))
            if (Exit.isSuccess(exit)) return exit.value
            throw new Rollback(exit)
          }).then((value) => Exit.succeed(value) as Exit.Exit<A, E>),
        catch: (cause) => cause
      }).pipe(
        Effect.catch((cause) =>
          cause instanceof Rollback
            ? Effect.succeed(cause.exit as Exit.Exit<A, E>)
            : Effect.fail(toSqlError(cause))
        )
      )
    )
  )

const pgliteClient = (db: Pick<PGlite, "query" | "exec">, inTransaction: boolean, root: PGlite): SqlClient => {
  const self: SqlClient = {
    dialect: "pglite",
    query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
      Effect.tryPromise({
        try: () => db.query<T>(text, params ? [...params] : undefined).then((r) => r.rows),
        catch: toSqlError
      }),
    exec: (text) => Effect.tryPromise({ try: () => db.exec(text).then(() => undefined), catch: toSqlError }),
    transaction: (f) =>
      inTransaction
        ? f(self)
        : bridgeTransaction((body) => root.transaction((tx) => body(pgliteClient(tx, true, root))), f)
  }
  return self
}

type PostgresSql = postgres.Sql<Record<string, never>>
type TransactionSql = postgres.TransactionSql<Record<string, never>>

const postgresClient = (sql: PostgresSql | TransactionSql, root: PostgresSql | undefined): SqlClient => {
  const self: SqlClient = {
    dialect: "postgres",
    query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
      Effect.tryPromise({
        // Parameters go through as text; the server casts them (the same as PGlite).
        try: () => sql.unsafe(text, (params ?? []) as Array<postgres.ParameterOrJSON<never>>, { prepare: true }).then((rows) => rows as unknown as Array<T>),
        catch: toSqlError
      }),
    exec: (text) => Effect.tryPromise({ try: () => sql.unsafe(text).simple().then(() => undefined), catch: toSqlError }),
    transaction: (f) =>
      root === undefined
        ? f(self)
        : bridgeTransaction((body) => root.begin((tx) => body(postgresClient(tx, undefined))) as Promise<never>, f)
  }
  return self
}

/** int8 → JS number: every bigint column holds epoch milliseconds or a count, far below 2^53. */
const int8AsNumber = {
  to: 20,
  from: [20],
  serialize: (value: number | bigint) => String(value),
  parse: (value: string) => Number(value)
}

export class Sql extends Context.Service<Sql, SqlClient>()("voltaic/store/Sql") {
  /** `role` names this process in the `DATA_DIR` lock, for the message another process shows. */
  static readonly layer = (target: DatabaseTarget, role = "voltaic server") =>
    Layer.effect(
      Sql,
      target._tag === "pglite" ? openPglite(target.dataDir, role) : openPostgres(target.url)
    )
}

const openPglite = (dataDir: string | undefined, role: string) =>
  // Taken before PGlite opens the directory and released after it closes (`memory://` needs none).
  Effect.andThen(dataDir === undefined ? Effect.void : lockDataDir(dataDir, role), Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const db = await PGlite.create(dataDir ? { dataDir } : undefined)
        await db.query("select 1")
        return db
      },
      catch: (cause) =>
        new StoreUnreachable({
          setting: dataDir ? "DATA_DIR" : "DATABASE_URL",
          message: `cannot open PGlite ${dataDir ? `in ${dataDir}` : "in memory"}: ${cause instanceof Error ? cause.message : String(cause)}`
        })
    }),
    (db) => Effect.promise(() => db.close()).pipe(Effect.ignore)
  )).pipe(Effect.map((db) => pgliteClient(db, false, db)))

const openPostgres = (url: Redacted.Redacted<string>) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const sql = postgres(Redacted.value(url), {
          max: 10,
          onnotice: () => {},
          connect_timeout: 5,
          types: { bigint: int8AsNumber }
        }) as unknown as PostgresSql
        try {
          await sql`select 1`
        } catch (cause) {
          await sql.end({ timeout: 0 })
          throw cause
        }
        return sql
      },
      catch: (cause) =>
        new StoreUnreachable({
          setting: "DATABASE_URL",
          message: `cannot reach the database at DATABASE_URL (${redactUrl(Redacted.value(url))}): ${cause instanceof Error ? cause.message : String(cause)}`
        })
    }),
    (sql) => Effect.promise(() => sql.end({ timeout: 5 })).pipe(Effect.ignore)
  ).pipe(Effect.map((sql) => postgresClient(sql, sql)))

const redactUrl = (raw: string): string => {
  try {
    const url = new URL(raw)
    if (url.password) url.password = "***"
    return url.toString()
  } catch {
    return "<malformed URL>"
  }
}
