import { Context, Effect, Exit, FiberSet, Layer, Redacted, Schema } from "effect"
import postgres from "postgres"
import type { DatabaseTarget } from "../config.ts"
import { lockDataDir } from "./dataDirLock.ts"
import { type EmbeddedDb, type EmbeddedQueryable, openEmbedded } from "./embedded.ts"
import { pgliteMaintenance } from "./maintenance.ts"
import { Unavailable } from "../domain/errors.ts"
import { makeOutage, type Outage } from "../domain/outage.ts"

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
  /**
   * Rows by `COPY <table> (<columns>) FROM STDIN` (`statement`), `text` in COPY's text format
   * (a line per row, tab-separated, `\N` for null), inside a transaction only (undefined
   * elsewhere). Its failure aborts the transaction.
   */
  readonly copyIn?: (statement: string, text: string) => Effect.Effect<void, SqlError>
  /** The embedded database itself (PGlite only): the cluster's `SqlClient` shares it. */
  readonly embedded?: EmbeddedDb | undefined
}

/**
 * Codes of a failure that says the connection, not the statement, failed: postgres.js's own
 * (CONNECTION_ENDED is this process ending the pool, so it is left out), Node's socket errors,
 * SQLSTATE class 08 (connection exception), 57P01–57P03 (the backend was terminated, the
 * server is shutting down or not yet accepting connections) and 53300 (too many connections).
 */
const CONNECTION_CODES = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "57P01",
  "57P02",
  "57P03",
  "53300"
])

export const isConnectionLoss = (error: SqlError): boolean =>
  error.code !== undefined && (
    CONNECTION_CODES.has(error.code) || error.code.startsWith("08") ||
    // A database closed to new connections (ALLOW_CONNECTIONS false, for maintenance).
    (error.code === "55000" && error.message.includes("not currently accepting connections"))
  )

/**
 * What a request whose statement failed on a lost connection is answered (503, 5.03): the
 * store logs the outage once, so the request is not logged as a defect.
 */
export const storeLost = new Unavailable({ retryAfterSeconds: 1, message: "the store is not reachable; retry shortly" })

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
  f: (tx: SqlClient) => Effect.Effect<A, E, R>,
  failed: (cause: unknown) => SqlError = toSqlError
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
            : Effect.fail(failed(cause))
        )
      )
    )
  )

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
    transaction: (f) =>
      inTransaction
        ? f(self)
        : bridgeTransaction((body) => root.transaction((tx) => body(pgliteClient(tx, true, root))), f),
    // PGlite reads COPY's data from a blob it names /dev/blob.
    copyIn: inTransaction
      ? (statement, text) =>
        Effect.tryPromise({
          try: () => db.query(statement.replace(/\bFROM\s+STDIN\s*$/i, "FROM '/dev/blob'"), [], { blob: text }).then(() => undefined),
          catch: toSqlError
        })
      : undefined
  }
  return self
}

type PostgresSql = postgres.Sql<Record<string, never>>
type TransactionSql = postgres.TransactionSql<Record<string, never>>

/** The pool's link to the server: its outage, and how a failure is classified. */
interface PostgresLink {
  readonly outage: Outage
  /**
   * Called with a failure's cause, and the outage's epoch when the work started: the failure
   * as a SqlError, counted as a loss when it is one.
   */
  readonly failed: (cause: unknown, epoch?: number) => SqlError
}

const postgresClient = (sql: PostgresSql | TransactionSql, root: PostgresSql | undefined, link: PostgresLink): SqlClient => {
  const { outage } = link
  const self: SqlClient = {
    dialect: "postgres",
    query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
      Effect.tryPromise({
        try: () => {
          const epoch = outage.epoch
          // Parameters go through as text; the server casts them (the same as PGlite).
          return sql.unsafe(text, (params ?? []) as Array<postgres.ParameterOrJSON<never>>, { prepare: true }).then((rows) => {
            if (outage.down) outage.restored(epoch)
            return rows as unknown as Array<T>
          }, (cause: unknown) => {
            throw link.failed(cause, epoch)
          })
        },
        catch: (cause) => cause instanceof SqlError ? cause : link.failed(cause)
      }),
    exec: (text) => Effect.tryPromise({ try: () => sql.unsafe(text).simple().then(() => undefined), catch: link.failed }),
    transaction: (f) =>
      root === undefined
        ? f(self)
        : bridgeTransaction((body) => root.begin((tx) => body(postgresClient(tx, undefined, link))) as Promise<never>, f, link.failed),
    copyIn: root === undefined ? (statement, text) => copyIn(sql, statement, text, link) : undefined
  }
  return self
}

/**
 * `COPY … FROM STDIN` in a transaction. postgres.js settles its writable neither way when the
 * server refuses the COPY after the data ended (porsager/postgres#1173, unfixed in 3.4.9): the
 * caller would wait for ever with the transaction open. So the end is taken when the data is
 * sent (the stream's `_final`, where postgres.js sends CopyDone), and a statement sent right
 * behind the COPY answers for it: it fails when the COPY failed (the transaction is aborted,
 * 25P02) or the connection was lost. A refusal while the data is still going fails the stream.
 */
const copyIn = (sql: PostgresSql | TransactionSql, statement: string, text: string, link: PostgresLink) =>
  Effect.tryPromise({
    try: async () => {
      const writable = await sql.unsafe(statement).writable()
      await new Promise<void>((resolve, reject) => {
        writable.on("error", reject)
        const final = writable._final.bind(writable)
        writable._final = (callback) => {
          final(callback)
          resolve()
        }
        writable.end(text)
      })
      try {
        await sql.unsafe("SELECT 1")
      } catch (cause) {
        const error = link.failed(cause)
        throw error.code === "25P02" ? new SqlError({ code: error.code, message: `${statement.split(" FROM")[0]} failed: the transaction was aborted`, cause }) : error
      }
    },
    catch: (cause) => cause instanceof SqlError ? cause : link.failed(cause)
  })

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

/** While the link is down, how often a `select 1` checks it, so recovery is seen without traffic. */
const PROBE_EVERY_MS = 1_000

const openPostgres = Effect.fnUntraced(function*(url: Redacted.Redacted<string>) {
  const run = yield* FiberSet.makeRuntime<never>()
  let ending = false
  const outage = makeOutage({
    lost: (reason) => `store: lost the connection to Postgres (${reason})`,
    restored: (seconds) => `store: reconnected to Postgres after ${seconds} s`
  }, {
    warn: (message) => void run(Effect.logWarning(message)),
    info: (message) => void run(Effect.logInfo(message))
  })
  let pool: PostgresSql | undefined
  const probe = () => {
    setTimeout(() => {
      if (ending || !outage.down || pool === undefined) return
      const epoch = outage.epoch
      pool`select 1`.then(() => outage.restored(epoch), (cause: unknown) => void failed(cause, epoch)).finally(probe)
    }, PROBE_EVERY_MS).unref()
  }
  const lost = (reason: string, epoch?: number) => {
    if (ending) return
    const wasDown = outage.down
    outage.lost(reason, epoch)
    if (!wasDown && outage.down) probe()
  }
  const failed = (cause: unknown, epoch?: number) => {
    const error = toSqlError(cause)
    if (isConnectionLoss(error)) lost(error.message, epoch)
    return error
  }
  const sql = yield* Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const sql = postgres(Redacted.value(url), {
          max: 10,
          onnotice: () => {},
          connect_timeout: 5,
          types: { bigint: int8AsNumber },
          // Connections are kept for the life of the process (no idle timeout, no maximum
          // lifetime), so a connection that closes was closed by the server or the network.
          max_lifetime: null,
          onclose: (id) => lost(`connection ${id} closed by the server or the network`)
        }) as unknown as PostgresSql
        try {
          await sql`select 1`
        } catch (cause) {
          ending = true
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
    (sql) =>
      Effect.promise(() => {
        ending = true
        return sql.end({ timeout: 5 })
      }).pipe(Effect.ignore)
  )
  pool = sql
  return postgresClient(sql, sql, { outage, failed })
})

/** A database URL with its password as `***`, for messages. */
export const redactUrl = (raw: string): string => {
  try {
    const url = new URL(raw)
    if (url.password) url.password = "***"
    return url.toString()
  } catch {
    return "<malformed URL>"
  }
}
