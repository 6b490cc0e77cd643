import { Effect } from "effect"
import type { SqlClient, SqlError } from "./Sql.ts"

/**
 * The database clock in epoch milliseconds: every process counts against one clock. `now()` is
 * fixed for the statement, so every mention of it in one statement reads the same instant.
 */
const NOW_MS = "(extract(epoch FROM now()) * 1000)::bigint"

/** The address of the row that counts an account's failures from every address. */
export const ANY_ADDRESS = ""

export interface AttemptCounts {
  /** Attempts of this account from this address in the window, this one included. */
  readonly fromAddress: number
  /** Attempts of this account from every address in the window, this one included. */
  readonly fromAnyAddress: number
  /** Until the window of this account and address ends. */
  readonly remainingMs: number
}

/**
 * Counts an attempt before its password is checked, in one statement for both rows, so
 * concurrent attempts (on any process) each see the count their own attempt made.
 * A row whose window has ended starts a new one.
 */
export const countAttempt = (
  sql: SqlClient,
  account: string,
  address: string,
  windowMs: number
): Effect.Effect<AttemptCounts, SqlError> =>
  sql.query<{ address: string; failures: number; remaining_ms: number }>(
    `INSERT INTO sign_in_failures AS f (account, address, failures, first_failed_at)
     VALUES ($1, '${ANY_ADDRESS}', 1, ${NOW_MS}), ($1, $2, 1, ${NOW_MS})
     ON CONFLICT (account, address) DO UPDATE SET
       failures = CASE WHEN f.first_failed_at > EXCLUDED.first_failed_at - $3::bigint THEN f.failures + 1 ELSE 1 END,
       first_failed_at = CASE WHEN f.first_failed_at > EXCLUDED.first_failed_at - $3::bigint
         THEN f.first_failed_at ELSE EXCLUDED.first_failed_at END
     RETURNING address, failures, (first_failed_at + $3::bigint - ${NOW_MS})::float8 AS remaining_ms`,
    [account, address, windowMs]
  ).pipe(
    Effect.map((rows) => {
      const pair = rows.find((row) => row.address !== ANY_ADDRESS)
      const total = rows.find((row) => row.address === ANY_ADDRESS)
      return {
        fromAddress: pair?.failures ?? 1,
        fromAnyAddress: total?.failures ?? 1,
        remainingMs: pair?.remaining_ms ?? windowMs
      }
    })
  )

/**
 * A successful sign-in: forgets the failures of this account from this address, and takes its
 * own attempt back out of the account's count (the failures from other addresses stay).
 */
export const clearAttempt = (sql: SqlClient, account: string, address: string): Effect.Effect<void, SqlError> =>
  sql.query(
    `WITH cleared AS (DELETE FROM sign_in_failures WHERE account = $1 AND address = $2)
     UPDATE sign_in_failures SET failures = failures - 1 WHERE account = $1 AND address = '${ANY_ADDRESS}' AND failures > 0`,
    [account, address]
  ).pipe(Effect.asVoid)

/** Deletes the rows whose window has ended; returns how many. */
export const deleteExpired = (sql: SqlClient, windowMs: number): Effect.Effect<number, SqlError> =>
  sql.query<{ deleted: number }>(
    `WITH expired AS (DELETE FROM sign_in_failures WHERE first_failed_at <= ${NOW_MS} - $1::bigint RETURNING 1)
     SELECT count(*)::integer AS deleted FROM expired`,
    [windowMs]
  ).pipe(Effect.map((rows) => rows[0]?.deleted ?? 0))
