import { Effect } from "effect"
import type { Connection } from "effect/sql/SqlConnection"
import {
  ConnectionError,
  ConstraintError,
  DeadlockError,
  LockTimeoutError,
  SerializationError,
  SqlError,
  SqlSyntaxError,
  UniqueViolation,
  UnknownError
} from "effect/sql/SqlError"

/**
 * A driver's failure as `effect/sql`'s `SqlError`, classified by SQLSTATE: effect's `Migrator`
 * treats a `UniqueViolation` / `ConstraintError` on its table as another process migrating.
 */
export const toSqlError = (operation: string) => (cause: unknown): SqlError => {
  const field = (name: string) =>
    typeof cause === "object" && cause !== null && name in cause ? String((cause as Record<string, unknown>)[name]) : ""
  const code = field("code")
  const props = { cause, message: cause instanceof Error ? cause.message : String(cause), operation }
  if (code === "23505") return new SqlError({ reason: new UniqueViolation({ ...props, constraint: field("constraint_name") || field("constraint") }) })
  if (code.startsWith("23")) return new SqlError({ reason: new ConstraintError(props) })
  if (code.startsWith("08")) return new SqlError({ reason: new ConnectionError(props) })
  if (code.startsWith("42")) return new SqlError({ reason: new SqlSyntaxError(props) })
  if (code === "40P01") return new SqlError({ reason: new DeadlockError(props) })
  if (code === "40001") return new SqlError({ reason: new SerializationError(props) })
  if (code === "55P03") return new SqlError({ reason: new LockTimeoutError(props) })
  return new SqlError({ reason: new UnknownError(props) })
}

/** Postgres (and PGlite) answer COMMIT of an aborted transaction with ROLLBACK, not an error. */
export const commit = (conn: Connection) =>
  Effect.flatMap(conn.executeRaw("COMMIT", []), (result) =>
    typeof result === "object" && result !== null && "command" in result && result.command === "ROLLBACK"
      ? Effect.fail(toSqlError("commit")(new Error("COMMIT rolled back an aborted transaction")))
      : Effect.void)
