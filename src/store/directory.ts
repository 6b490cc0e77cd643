import { Effect } from "effect"
import { hashPassword } from "../auth/secrets.ts"
import { Conflict, NotFound } from "../domain/errors.ts"
import { newId } from "../domain/ids.ts"
import { bool, num, str } from "./rows.ts"
import type { Row, SqlClient, SqlError } from "./Sql.ts"

/** Organisation users and teams (the user-management interface). */

export interface TeamRef {
  id: string
  name: string
  isAdmin: boolean
}

export interface OrganisationUserJson {
  id: string
  userId: string
  firstName: string
  lastName: string
  fullName: string
  emailAddress: string
  isAdmin: boolean
  loginViaSsoOnly: boolean
  teams: Array<TeamRef>
  createdAt: number
  updatedAt: number
}

export interface MemberJson {
  id: string
  userId: string
  name: string
  fullName: string
  emailAddress: string
  isAdmin: boolean
}

export interface TeamJson {
  id: string
  name: string
  isAdmin: boolean
  organisationId: string
  members: Array<MemberJson>
  createdAt: number
  updatedAt: number
}

/** "Ada King Lovelace" → first "Ada", last "King Lovelace". */
export const splitName = (fullName: string): { firstName: string; lastName: string } => {
  const parts = fullName.trim().split(/\s+/)
  return { firstName: parts[0] ?? "", lastName: parts.slice(1).join(" ") }
}

const asArray = (value: unknown): Array<Row> => (Array.isArray(value) ? (value as Array<Row>) : [])

const toOrganisationUser = (row: Row): OrganisationUserJson => {
  const fullName = str(row, "full_name")
  return {
    id: str(row, "id"),
    userId: str(row, "user_id"),
    ...splitName(fullName),
    fullName,
    emailAddress: str(row, "email_address"),
    isAdmin: bool(row, "is_admin"),
    loginViaSsoOnly: bool(row, "login_via_sso_only"),
    teams: asArray(row.teams).map((t) => ({ id: str(t, "id"), name: str(t, "name"), isAdmin: bool(t, "is_admin") })),
    createdAt: num(row, "created_at"),
    updatedAt: num(row, "updated_at")
  }
}

const USER_SELECT = `ou.id, ou.user_id, ou.is_admin, ou.created_at, ou.updated_at,
  u.full_name, u.email_address, u.login_via_sso_only,
  COALESCE((SELECT json_agg(json_build_object('id', t.id, 'name', t.name, 'is_admin', t.is_admin) ORDER BY t.created_at)
            FROM team_members m JOIN teams t ON t.id = m.team_id WHERE m.organisation_user_id = ou.id), '[]'::json) AS teams`

const USER_FROM = "organisation_users ou JOIN users u ON u.id = ou.user_id"

export const userOrder: Record<string, string> = {
  createdAt: "ou.created_at",
  updatedAt: "ou.updated_at",
  id: "ou.id",
  emailAddress: "u.email_address",
  fullName: "u.full_name"
}

export const getOrganisationUser = (sql: SqlClient, organisationId: string, id: string) =>
  sql.query(`SELECT ${USER_SELECT} FROM ${USER_FROM} WHERE ou.id = $1 AND ou.organisation_id = $2`, [id, organisationId]).pipe(
    Effect.flatMap(([row]) =>
      row === undefined ? Effect.fail(new NotFound({ resource: "organisation user", id })) : Effect.succeed(toOrganisationUser(row))
    )
  )

export const listOrganisationUsers = (
  sql: SqlClient,
  organisationId: string,
  list: { limit: number; page: number; sort: "ASC" | "DESC"; order: string }
) =>
  Effect.all([
    sql.query(
      `SELECT ${USER_SELECT} FROM ${USER_FROM} WHERE ou.organisation_id = $1
       ORDER BY ${userOrder[list.order]} ${list.sort}, ou.id ${list.sort} LIMIT $2 OFFSET $3`,
      [organisationId, list.limit, list.page * list.limit]
    ),
    sql.query<{ n: number }>("SELECT count(*)::int8 AS n FROM organisation_users WHERE organisation_id = $1", [organisationId])
  ]).pipe(Effect.map(([rows, [count]]) => ({ items: rows.map(toOrganisationUser), total: Number(count.n) })))

/**
 * Creates the user, or takes the registered one with that address, and adds it to the
 * organisation. Already a member → 409.
 */
export const addOrganisationUser = (
  tx: SqlClient,
  organisationId: string,
  input: { emailAddress: string; fullName: string; password: string | undefined; loginViaSsoOnly: boolean; isAdmin: boolean }
): Effect.Effect<string, Conflict | SqlError> =>
  Effect.gen(function*() {
    const now = Date.now()
    const [existing] = yield* tx.query<{ id: string }>("SELECT id FROM users WHERE lower(email_address) = lower($1)", [input.emailAddress])
    let userId = existing?.id
    // An account of another organisation joins as it is: its password is its own, and one given
    // here would be ignored, leaving whoever set it with a login that does not work.
    if (userId !== undefined && input.password !== undefined) {
      return yield* new Conflict({
        message: `emailAddress: ${input.emailAddress} already has an account, which keeps its own password; add it without a password`
      })
    }
    if (userId === undefined) {
      userId = newId("usr", now)
      const passwordHash = input.password === undefined ? null : yield* Effect.promise(() => hashPassword(input.password ?? ""))
      yield* tx.query(
        `INSERT INTO users (id, email_address, full_name, password_hash, login_via_sso_only, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6)`,
        [userId, input.emailAddress, input.fullName, passwordHash, input.loginViaSsoOnly, now]
      )
    }
    const id = newId("ou", now)
    const inserted = yield* tx.query(
      `INSERT INTO organisation_users (id, organisation_id, user_id, is_admin, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (organisation_id, user_id) DO NOTHING RETURNING id`,
      [id, organisationId, userId, input.isAdmin, now]
    )
    if (inserted.length === 0) {
      return yield* new Conflict({ message: `emailAddress: ${input.emailAddress} is already a user of this organisation` })
    }
    return id
  })

const otherAdmins = (tx: SqlClient, organisationId: string, id: string) =>
  tx.query<{ n: number }>(
    "SELECT count(*)::int8 AS n FROM organisation_users WHERE organisation_id = $1 AND is_admin AND id <> $2",
    [organisationId, id]
  ).pipe(Effect.map(([row]) => Number(row.n)))

/** The last admin can be neither demoted nor removed: the organisation would be unmanageable. */
export const setAdmin = Effect.fnUntraced(function*(tx: SqlClient, organisationId: string, id: string, isAdmin: boolean) {
  // Lock the organisation's admins so two concurrent demotions cannot both pass the check.
  yield* tx.query("SELECT id FROM organisation_users WHERE organisation_id = $1 AND is_admin FOR UPDATE", [organisationId])
  if (!isAdmin && (yield* otherAdmins(tx, organisationId, id)) === 0) {
    const [row] = yield* tx.query<{ is_admin: boolean }>("SELECT is_admin FROM organisation_users WHERE id = $1 AND organisation_id = $2", [id, organisationId])
    if (row?.is_admin === true) return yield* new Conflict({ message: "isAdmin: the last admin of an organisation cannot be demoted" })
  }
  const rows = yield* tx.query("UPDATE organisation_users SET is_admin = $3, updated_at = $4 WHERE id = $1 AND organisation_id = $2 RETURNING id", [
    id,
    organisationId,
    isAdmin,
    Date.now()
  ])
  if (rows.length === 0) return yield* new NotFound({ resource: "organisation user", id })
})

/**
 * Removes the user from the organisation (its team memberships, alert subscriptions and
 * tokens go with it) and deletes the user when it belongs to no other organisation.
 */
export const removeOrganisationUser = Effect.fnUntraced(function*(tx: SqlClient, organisationId: string, id: string) {
  yield* tx.query("SELECT id FROM organisation_users WHERE organisation_id = $1 AND is_admin FOR UPDATE", [organisationId])
  const [row] = yield* tx.query<{ user_id: string; is_admin: boolean }>(
    "SELECT user_id, is_admin FROM organisation_users WHERE id = $1 AND organisation_id = $2",
    [id, organisationId]
  )
  if (row === undefined) return yield* new NotFound({ resource: "organisation user", id })
  if (row.is_admin && (yield* otherAdmins(tx, organisationId, id)) === 0) {
    return yield* new Conflict({ message: "the last admin of an organisation cannot be removed" })
  }
  yield* tx.query("DELETE FROM organisation_users WHERE id = $1", [id])
  yield* tx.query(
    "DELETE FROM users u WHERE u.id = $1 AND NOT EXISTS (SELECT 1 FROM organisation_users ou WHERE ou.user_id = u.id)",
    [row.user_id]
  )
})

const TEAM_SELECT = `t.id, t.name, t.is_admin, t.organisation_id, t.created_at, t.updated_at,
  COALESCE((SELECT json_agg(json_build_object('id', ou.id, 'user_id', ou.user_id, 'full_name', u.full_name,
                   'email_address', u.email_address, 'is_admin', ou.is_admin) ORDER BY m.created_at)
            FROM team_members m JOIN organisation_users ou ON ou.id = m.organisation_user_id JOIN users u ON u.id = ou.user_id
            WHERE m.team_id = t.id), '[]'::json) AS members`

const toTeam = (row: Row): TeamJson => ({
  id: str(row, "id"),
  name: str(row, "name"),
  isAdmin: bool(row, "is_admin"),
  organisationId: str(row, "organisation_id"),
  members: asArray(row.members).map((m) => ({
    id: str(m, "id"),
    userId: str(m, "user_id"),
    name: str(m, "full_name"),
    fullName: str(m, "full_name"),
    emailAddress: str(m, "email_address"),
    isAdmin: bool(m, "is_admin")
  })),
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

export const getTeam = (sql: SqlClient, organisationId: string, id: string) =>
  sql.query(`SELECT ${TEAM_SELECT} FROM teams t WHERE t.id = $1 AND t.organisation_id = $2`, [id, organisationId]).pipe(
    Effect.flatMap(([row]) => (row === undefined ? Effect.fail(new NotFound({ resource: "team", id })) : Effect.succeed(toTeam(row))))
  )

export const listTeams = (sql: SqlClient, organisationId: string, list: { limit: number; page: number }) =>
  Effect.all([
    sql.query(`SELECT ${TEAM_SELECT} FROM teams t WHERE t.organisation_id = $1 ORDER BY t.created_at DESC, t.id DESC LIMIT $2 OFFSET $3`, [
      organisationId,
      list.limit,
      list.page * list.limit
    ]),
    sql.query<{ n: number }>("SELECT count(*)::int8 AS n FROM teams WHERE organisation_id = $1", [organisationId])
  ]).pipe(Effect.map(([rows, [count]]) => ({ items: rows.map(toTeam), total: Number(count.n) })))

export const createTeam = (sql: SqlClient, organisationId: string, input: { name: string; isAdmin: boolean }) => {
  const now = Date.now()
  const id = newId("tem", now)
  return sql.query("INSERT INTO teams (id, organisation_id, name, is_admin, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)", [
    id,
    organisationId,
    input.name,
    input.isAdmin,
    now
  ]).pipe(Effect.as(id))
}

export const deleteTeam = (sql: SqlClient, organisationId: string, id: string) =>
  sql.query("DELETE FROM teams WHERE id = $1 AND organisation_id = $2 RETURNING id", [id, organisationId]).pipe(
    Effect.flatMap((rows) => (rows.length === 0 ? Effect.fail(new NotFound({ resource: "team", id })) : Effect.void))
  )

const requireInOrganisation = (sql: SqlClient, table: "teams" | "organisation_users" | "spaces", resource: string, organisationId: string, id: string) =>
  sql.query(`SELECT 1 FROM ${table} WHERE id = $1 AND organisation_id = $2`, [id, organisationId]).pipe(
    Effect.flatMap((rows) => (rows.length === 0 ? Effect.fail(new NotFound({ resource, id })) : Effect.void))
  )

/** Adding a member twice is harmless. A user of another organisation is not found. */
export const addTeamMember = Effect.fnUntraced(function*(sql: SqlClient, organisationId: string, teamId: string, organisationUserId: string) {
  yield* requireInOrganisation(sql, "teams", "team", organisationId, teamId)
  yield* requireInOrganisation(sql, "organisation_users", "organisation user", organisationId, organisationUserId)
  yield* sql.query(
    "INSERT INTO team_members (team_id, organisation_user_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    [teamId, organisationUserId, Date.now()]
  )
})

export const removeTeamMember = Effect.fnUntraced(function*(sql: SqlClient, organisationId: string, teamId: string, organisationUserId: string) {
  yield* requireInOrganisation(sql, "teams", "team", organisationId, teamId)
  const rows = yield* sql.query("DELETE FROM team_members WHERE team_id = $1 AND organisation_user_id = $2 RETURNING team_id", [
    teamId,
    organisationUserId
  ])
  if (rows.length === 0) return yield* new NotFound({ resource: "team member", id: organisationUserId })
})

export const addSpaceAlertUser = Effect.fnUntraced(function*(sql: SqlClient, organisationId: string, spaceId: string, organisationUserId: string) {
  yield* requireInOrganisation(sql, "spaces", "space", organisationId, spaceId)
  yield* requireInOrganisation(sql, "organisation_users", "organisation user", organisationId, organisationUserId)
  yield* sql.query(
    "INSERT INTO space_alert_users (space_id, organisation_user_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    [spaceId, organisationUserId, Date.now()]
  )
})

export const removeSpaceAlertUser = Effect.fnUntraced(function*(sql: SqlClient, organisationId: string, spaceId: string, organisationUserId: string) {
  yield* requireInOrganisation(sql, "spaces", "space", organisationId, spaceId)
  const rows = yield* sql.query("DELETE FROM space_alert_users WHERE space_id = $1 AND organisation_user_id = $2 RETURNING space_id", [
    spaceId,
    organisationUserId
  ])
  if (rows.length === 0) return yield* new NotFound({ resource: "alert recipient", id: organisationUserId })
})
