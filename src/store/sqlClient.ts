import { Effect, Exit, Schema } from "effect"
import { Unavailable } from "../domain/errors.ts"
import type { EmbeddedDb } from "./embedded.ts"

/** What both drivers share: the client interface, its errors, and the transaction bridge. */

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

/** One statement of a `script`: parameterised, or `COPY <table> (<columns>) FROM STDIN` with its data (as `copyIn` takes them). */
export type ScriptStep =
  | { readonly text: string; readonly params?: ReadonlyArray<unknown> }
  | { readonly copy: string; readonly data: string }

export interface SqlClient {
  readonly dialect: "pglite" | "postgres"
  /** One parameterised statement ($1, $2…). */
  query<T = Row>(text: string, params?: ReadonlyArray<unknown>): Effect.Effect<Array<T>, SqlError>
  /** Several statements without parameters (migrations). */
  exec(text: string): Effect.Effect<void, SqlError>
  /**
   * One parameterised statement whose rows are not needed, its parameters text (or null): the
   * writer's batches. Prepared once per text on both drivers (postgres.js names its statements;
   * PGlite's thread keeps them, where `query` parses and plans each call anew).
   */
  write(text: string, params: ReadonlyArray<string | null>): Effect.Effect<void, SqlError>
  /** Runs `f` in one transaction; any failure or defect of `f` rolls it back. */
  transaction<A, E, R>(f: (tx: SqlClient) => Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R>
  /**
   * Rows by `COPY <table> (<columns>) FROM STDIN` (`statement`), `text` in COPY's text format
   * (a line per row, tab-separated, `\N` for null), inside a transaction only (undefined
   * elsewhere). Its failure aborts the transaction.
   */
  readonly copyIn?: (statement: string, text: string) => Effect.Effect<void, SqlError>
  /**
   * Statements run in order in one transaction (inside a transaction: in it), their rows
   * dropped: writes that need nothing from each other's answers. A failure of any rolls them all
   * back and fails with that statement's error. PGlite takes the whole script in one request to
   * its thread, where `transaction` takes one per statement plus BEGIN and COMMIT, each of which
   * waits for this thread's event loop to send the next (the thread idles meanwhile).
   */
  script(steps: ReadonlyArray<ScriptStep>): Effect.Effect<void, SqlError>
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

export const toSqlError = (cause: unknown): SqlError => {
  const code = typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string"
    ? cause.code
    : undefined
  const message = cause instanceof Error ? cause.message : String(cause)
  return new SqlError({ code, message, cause })
}

/** `script` as statements of a transaction, one at a time (the Postgres driver's). */
export const scriptInTransaction = (sql: SqlClient, steps: ReadonlyArray<ScriptStep>): Effect.Effect<void, SqlError> =>
  sql.transaction((tx) => Effect.forEach(steps, (step) => "copy" in step ? tx.copyIn!(step.copy, step.data) : tx.query(step.text, step.params), { discard: true }))

/** Carries a failed Exit of the inner effect through the driver's promise-based transaction. */
class Rollback {
  constructor(readonly exit: Exit.Exit<unknown, unknown>) {}
}

/**
 * Bridges an Effect body into a driver's `begin(async tx => …)`: the body runs with the
 * caller's services, and its failure rolls back and is re-raised unchanged.
 */
export const bridgeTransaction = <A, E, R>(
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
