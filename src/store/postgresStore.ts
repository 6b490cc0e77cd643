import { Effect, FiberSet, Redacted } from "effect"
import postgres from "postgres"
import { makeOutage, type Outage } from "../domain/outage.ts"
import { bridgeTransaction, isConnectionLoss, scriptInTransaction, type SqlClient, SqlError, StoreUnreachable, toSqlError } from "./sqlClient.ts"

/** The Postgres store: a postgres.js pool as a `SqlClient`, with its outage watched. */

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
    write: (text, params) => Effect.asVoid(self.query(text, params)),
    transaction: (f) =>
      root === undefined
        ? f(self)
        : bridgeTransaction((body) => root.begin((tx) => body(postgresClient(tx, undefined, link))) as Promise<never>, f, link.failed),
    copyIn: root === undefined ? (statement, text) => copyIn(sql, statement, text, link) : undefined,
    script: (steps) => scriptInTransaction(self, steps)
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

/**
 * How long the start waits for the database's first answer: a connection's own timeout
 * (`connect_timeout`, 5 s) and a retry or two, past which the start stops with one line.
 */
const FIRST_ANSWER_MS = 15_000

/** While the link is down, how often a `select 1` checks it, so recovery is seen without traffic. */
const PROBE_EVERY_MS = 1_000

export const openPostgres = Effect.fnUntraced(function*(url: Redacted.Redacted<string>) {
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
        let waited: ReturnType<typeof setTimeout> | undefined
        try {
          // A server that accepts connections but does not speak PostgreSQL (another service's
          // port) never fails a connection's timeout: postgres.js reconnects on every answer it
          // cannot read, and the query waits for good.
          await Promise.race([
            sql`select 1`,
            new Promise<never>((_, reject) => {
              waited = setTimeout(
                () => reject(new Error(`no PostgreSQL answer within ${FIRST_ANSWER_MS / 1000} s: is it a PostgreSQL server?`)),
                FIRST_ANSWER_MS
              )
            })
          ])
        } catch (cause) {
          ending = true
          await sql.end({ timeout: 0 })
          throw cause
        } finally {
          clearTimeout(waited)
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
