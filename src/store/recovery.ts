import { Effect, Option, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { hashPassword } from "../auth/secrets.ts"
import { type CreatedApiKey, insertApiKey } from "./accounts.ts"
import { str } from "./rows.ts"
import type { SqlClient, SqlError } from "./Sql.ts"

/** A recovery command that cannot do what it was asked; `message` names the option and the rule. */
export class RecoveryRefused extends Schema.TaggedError<RecoveryRefused>()("RecoveryRefused", {
  message: Schema.String
}) {}

/** The same rule as every password the API accepts (`createOrganisationBody`). */
const MIN_PASSWORD_LENGTH = 8

export interface Organisation {
  readonly id: string
  readonly name: string
}

/**
 * The organisation given by id, or by default the first one: the platform organisation the
 * first start created (the oldest, should there be several).
 */
export const findOrganisation = (sql: SqlClient, id: Option.Option<string>): Effect.Effect<Organisation, RecoveryRefused | SqlError> =>
  Effect.flatMap(
    Option.match(id, {
      onNone: () => sql.query("SELECT id, name FROM organisations ORDER BY is_platform DESC, created_at, id LIMIT 1"),
      onSome: (value) => sql.query("SELECT id, name FROM organisations WHERE id = $1", [value])
    }),
    ([row]) =>
      row !== undefined
        ? Effect.succeed({ id: str(row, "id"), name: str(row, "name") })
        : Effect.fail(
          new RecoveryRefused({
            message: Option.isSome(id)
              ? `--organisation: no organisation has the id ${id.value}`
              : "the database has no organisation yet: start the server once, and it creates the first one"
          })
        )
  )

export interface PasswordReset {
  readonly emailAddress: string
  /** Present when generated here: printed once, stored only as its hash. */
  readonly generatedPassword: string | undefined
  readonly revokedTokens: number
}

/**
 * Sets a user's password and revokes every token the user holds, in one transaction. The user
 * is given by e-mail address, or by default the owner (first administrator) of the first
 * organisation. Without a password, one is generated.
 */
export const resetPassword = (
  sql: SqlClient,
  input: { readonly emailAddress: Option.Option<string>; readonly password: Option.Option<string> }
): Effect.Effect<PasswordReset, RecoveryRefused | SqlError> =>
  sql.transaction((tx) =>
    Effect.gen(function*() {
      if (Option.isSome(input.password) && input.password.value.length < MIN_PASSWORD_LENGTH) {
        return yield* new RecoveryRefused({ message: `--password: must be at least ${MIN_PASSWORD_LENGTH} characters` })
      }
      const rows = Option.isSome(input.emailAddress)
        ? yield* tx.query("SELECT id, email_address FROM users WHERE lower(email_address) = lower($1)", [input.emailAddress.value])
        : yield* Effect.flatMap(findOrganisation(tx, Option.none()), (organisation) =>
          tx.query(
            `SELECT u.id, u.email_address FROM organisation_users ou JOIN users u ON u.id = ou.user_id
             WHERE ou.organisation_id = $1 AND ou.is_admin ORDER BY ou.created_at, ou.id LIMIT 1`,
            [organisation.id]
          ))
      const user = rows[0]
      if (user === undefined) {
        return yield* new RecoveryRefused({
          message: Option.isSome(input.emailAddress)
            ? `--email: no user has the e-mail address ${input.emailAddress.value}`
            : "the first organisation has no administrator: give --email"
        })
      }
      const generatedPassword = Option.isNone(input.password) ? randomBytes(12).toString("base64url") : undefined
      const passwordHash = yield* Effect.promise(() => hashPassword(generatedPassword ?? Option.getOrThrow(input.password)))
      const now = Date.now()
      yield* tx.query("UPDATE users SET password_hash = $2, updated_at = $3 WHERE id = $1", [str(user, "id"), passwordHash, now])
      const revoked = yield* tx.query("UPDATE user_tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL RETURNING id", [
        str(user, "id"),
        now
      ])
      return { emailAddress: str(user, "email_address"), generatedPassword, revokedTokens: revoked.length }
    })
  )

/** A new application key for the organisation given by id, or the first one. */
export const createAppKey = Effect.fnUntraced(function*(
  sql: SqlClient,
  input: { readonly organisationId: Option.Option<string>; readonly name: string; readonly readOnly: boolean }
): Effect.fn.Return<{ organisation: Organisation; key: CreatedApiKey }, RecoveryRefused | SqlError> {
  if (input.name.trim() === "") return yield* new RecoveryRefused({ message: "--name: must not be empty" })
  const organisation = yield* findOrganisation(sql, input.organisationId)
  const key = yield* insertApiKey(sql, organisation.id, { name: input.name, readOnly: input.readOnly })
  return { organisation, key }
})
