import { Effect } from "effect"
import { hashPassword, hashSecret, secretHint, verifyPassword } from "../auth/secrets.ts"
import { Conflict, InvalidInput, NotFound, Unauthorized } from "../domain/errors.ts"
import { newId, newSecret } from "../domain/ids.ts"
import { bool, num, str } from "./rows.ts"
import type { Row, SqlClient, SqlError } from "./Sql.ts"

export interface OwnerInput {
  readonly emailAddress: string
  readonly fullName: string
  readonly password: string
}

export interface ApiKeyJson {
  id: string
  name: string
  readOnly: boolean
  hint: string
  createdAt: number
  updatedAt: number
}

export interface CreatedApiKey extends ApiKeyJson {
  secretKey: string
}

export const toApiKey = (row: Row): ApiKeyJson => ({
  id: str(row, "id"),
  name: str(row, "name"),
  readOnly: bool(row, "read_only"),
  hint: str(row, "secret_hint"),
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

const tryPromise = <A>(f: () => Promise<A>) => Effect.promise(f)

export const insertApiKey = Effect.fnUntraced(function*(
  sql: SqlClient,
  organisationId: string,
  input: { readonly name: string; readonly readOnly: boolean; readonly secretKey?: string | undefined }
): Effect.fn.Return<CreatedApiKey, SqlError> {
  const now = Date.now()
  const secretKey = input.secretKey ?? newSecret("a_sk")
  const id = newId("key", now)
  yield* sql.query(
    `INSERT INTO api_keys (id, organisation_id, name, secret_hash, secret_hint, read_only, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`,
    [id, organisationId, input.name, hashSecret(secretKey), secretHint(secretKey), input.readOnly, now]
  )
  return { id, name: input.name, readOnly: input.readOnly, hint: secretHint(secretKey), createdAt: now, updatedAt: now, secretKey }
})

export interface CreatedOrganisation {
  organisation: { id: string; name: string; createdAt: number; updatedAt: number }
  owner: { id: string; userId: string; emailAddress: string; fullName: string; isAdmin: true }
  apiKey: CreatedApiKey
}

/**
 * An organisation, its owner (an admin organisation user) and its first application key,
 * in the caller's transaction. The e-mail address must not be registered yet.
 */
export const insertOrganisation = Effect.fnUntraced(function*(
  tx: SqlClient,
  input: {
    readonly name: string
    readonly isPlatform: boolean
    readonly owner: OwnerInput
    readonly appKey?: string | undefined
  }
): Effect.fn.Return<CreatedOrganisation, Conflict | SqlError> {
  const now = Date.now()
  const existing = yield* tx.query("SELECT 1 FROM users WHERE lower(email_address) = lower($1)", [input.owner.emailAddress])
  if (existing.length > 0) {
    return yield* new Conflict({ message: `owner.emailAddress: ${input.owner.emailAddress} is already registered` })
  }
  const organisationId = newId("org", now)
  const userId = newId("usr", now)
  const organisationUserId = newId("ou", now)
  const passwordHash = yield* tryPromise(() => hashPassword(input.owner.password))
  yield* tx.query("INSERT INTO organisations (id, name, is_platform, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)", [
    organisationId,
    input.name,
    input.isPlatform,
    now
  ])
  yield* tx.query(
    `INSERT INTO users (id, email_address, full_name, password_hash, is_platform_admin, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $6)`,
    [userId, input.owner.emailAddress, input.owner.fullName, passwordHash, input.isPlatform, now]
  )
  yield* tx.query(
    `INSERT INTO organisation_users (id, organisation_id, user_id, is_admin, created_at, updated_at)
     VALUES ($1, $2, $3, true, $4, $4)`,
    [organisationUserId, organisationId, userId, now]
  )
  const apiKey = yield* insertApiKey(tx, organisationId, { name: "default", readOnly: false, secretKey: input.appKey })
  return {
    organisation: { id: organisationId, name: input.name, createdAt: now, updatedAt: now },
    owner: { id: organisationUserId, userId, emailAddress: input.owner.emailAddress, fullName: input.owner.fullName, isAdmin: true },
    apiKey
  }
})

/** Token lifetimes: a working day for access, a month for refresh. */
export const ACCESS_TOKEN_TTL_MS = 24 * 60 * 60 * 1000
export const REFRESH_TOKEN_TTL_MS = 30 * 24 * 60 * 60 * 1000

export interface IssuedToken {
  accessToken: string
  token: string
  refreshToken: string
  tokenType: "bearer"
  expiresIn: number
  scope: string
}

const issueToken = Effect.fnUntraced(function*(sql: SqlClient, user: Row, scope: string) {
  const now = Date.now()
  const accessToken = newSecret("u_at")
  const refreshToken = newSecret("u_rt")
  yield* sql.query(
    `INSERT INTO user_tokens (id, token_hash, refresh_hash, user_id, organisation_user_id, organisation_id, scope, expires_at, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      newId("tok", now),
      hashSecret(accessToken),
      hashSecret(refreshToken),
      str(user, "user_id"),
      str(user, "organisation_user_id"),
      str(user, "organisation_id"),
      scope,
      now + ACCESS_TOKEN_TTL_MS,
      now
    ]
  )
  return {
    accessToken,
    token: accessToken,
    refreshToken,
    tokenType: "bearer",
    expiresIn: ACCESS_TOKEN_TTL_MS / 1000,
    scope
  } satisfies IssuedToken
})

const invalidCredentials = new Unauthorized({ message: "username or password is wrong" })

/**
 * Password grant: `POST /auth/token` names the organisation by its application key; the console's
 * `POST /auth/signIn` may leave it out, and then the user must belong to exactly one.
 */
export const signIn = (
  sql: SqlClient,
  organisationId: string | undefined,
  input: { readonly username: string; readonly password: string; readonly scope: string }
): Effect.Effect<IssuedToken, Unauthorized | InvalidInput | SqlError> =>
  Effect.gen(function*() {
    const rows = yield* sql.query(
      `SELECT u.id AS user_id, u.password_hash, u.login_via_sso_only, ou.id AS organisation_user_id, ou.organisation_id
       FROM users u JOIN organisation_users ou ON ou.user_id = u.id
       WHERE lower(u.email_address) = lower($1) AND ($2::text IS NULL OR ou.organisation_id = $2)
       ORDER BY ou.created_at`,
      [input.username, organisationId ?? null]
    )
    const user = rows[0]
    const hash = user === undefined ? null : (user.password_hash as string | null)
    // Verify against a dummy hash when the user is unknown, so timing does not tell.
    const ok = yield* tryPromise(() => verifyPassword(input.password, hash ?? DUMMY_HASH))
    if (user === undefined || hash === null || !ok || bool(user, "login_via_sso_only")) return yield* invalidCredentials
    // Told only to whom gave the right password.
    if (rows.length > 1) {
      return yield* new InvalidInput({ field: "organisationId", message: "organisationId: this user belongs to several organisations; name one" })
    }
    return yield* issueToken(sql, user, input.scope)
  })

/** Refresh grant: a live refresh token yields a new access token; the old pair is revoked. */
/**
 * A new token for a refresh token of the organisation whose application key asks (the sign-in's
 * rule): one of another organisation is unknown here, and stays unspent.
 */
export const refresh = Effect.fnUntraced(function*(
  sql: SqlClient,
  organisationId: string,
  refreshToken: string
): Effect.fn.Return<IssuedToken, Unauthorized | SqlError> {
  const rows = yield* sql.query(
    `UPDATE user_tokens SET revoked_at = $2
     WHERE refresh_hash = $1 AND revoked_at IS NULL AND created_at > $3 AND organisation_id = $4
     RETURNING user_id, organisation_user_id, organisation_id, scope`,
    [hashSecret(refreshToken), Date.now(), Date.now() - REFRESH_TOKEN_TTL_MS, organisationId]
  )
  if (rows.length === 0) return yield* new Unauthorized({ message: "refreshToken is unknown, expired or revoked" })
  return yield* issueToken(sql, rows[0], str(rows[0], "scope"))
})

/** Revokes a token given either its access or its refresh secret. True when one was live. */
export const revokeToken = (sql: SqlClient, token: string) =>
  sql.query(
    "UPDATE user_tokens SET revoked_at = $2 WHERE (token_hash = $1 OR refresh_hash = $1) AND revoked_at IS NULL RETURNING id",
    [hashSecret(token), Date.now()]
  ).pipe(Effect.map((rows) => rows.length > 0))

export const deleteApiKey = (sql: SqlClient, organisationId: string, id: string) =>
  sql.query("DELETE FROM api_keys WHERE id = $1 AND organisation_id = $2 RETURNING id", [id, organisationId]).pipe(
    Effect.flatMap((rows) => rows.length === 0 ? Effect.fail(new NotFound({ resource: "apiKey", id })) : Effect.void)
  )

export const organisationName = (sql: SqlClient, organisationId: string) =>
  sql.query<{ name: string }>("SELECT name FROM organisations WHERE id = $1", [organisationId]).pipe(
    Effect.map((rows) => rows[0]?.name ?? "")
  )

// scrypt hash of a random password nobody knows; only used to spend the same time.
const DUMMY_HASH =
  "scrypt$32768$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
