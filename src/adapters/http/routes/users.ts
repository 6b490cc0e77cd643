import { z } from "@hono/zod-openapi"
import { Effect, Predicate } from "effect"
import { randomBytes } from "node:crypto"
import type { Context } from "hono"
import { Auth } from "../../../auth/Auth.ts"
import { constantTimeEqual, hashSecret } from "../../../auth/secrets.ts"
import { type SignInAttempt, SignInGuard } from "../../../auth/SignInGuard.ts"
import { NotFound } from "../../../domain/errors.ts"
import { newId, newSecret } from "../../../domain/ids.ts"
import { type SpaceJson, spaceQuery } from "../../../store/spaces.ts"
import { Spaces } from "../../../supervisor/Spaces.ts"
import { getOne } from "../../../store/crud.ts"
import {
  addOrganisationUser,
  addSpaceAlertUser,
  addTeamMember,
  createTeam,
  deleteTeam,
  getOrganisationUser,
  getTeam,
  listOrganisationUsers,
  listTeams,
  removeOrganisationUser,
  removeSpaceAlertUser,
  removeTeamMember,
  setAdmin,
  userOrder
} from "../../../store/directory.ts"
import { Sql } from "../../../store/Sql.ts"
import { readBody } from "../body.ts"
import { peerAddress } from "../errors.ts"
import { intParam, listParams, sortParam } from "../params.ts"
import { type Api, listReply, Reply } from "../route.ts"
import { spaceSchema } from "../schemas.ts"

const teamRef = z.object({ id: z.string(), name: z.string(), isAdmin: z.boolean() })
const organisationUserSchema = z.object({
  id: z.string(),
  userId: z.string(),
  firstName: z.string(),
  lastName: z.string(),
  fullName: z.string(),
  emailAddress: z.string(),
  isAdmin: z.boolean(),
  loginViaSsoOnly: z.boolean(),
  teams: z.array(teamRef),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("OrganisationUser")

const memberSchema = z.object({
  id: z.string(),
  userId: z.string(),
  name: z.string(),
  fullName: z.string(),
  emailAddress: z.string(),
  isAdmin: z.boolean()
})
const teamSchema = z.object({
  id: z.string(),
  name: z.string(),
  isAdmin: z.boolean(),
  organisationId: z.string(),
  members: z.array(memberSchema),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("Team")

const managementClientSchema = z.object({ id: z.string(), name: z.string(), clientId: z.string(), createdAt: z.number().int() })
  .openapi("ManagementClient")

const bool = z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")])
const ouParams = z.object({ organisationUserId: z.string().min(1).max(200) })
const teamParams = z.object({ id: z.string().min(1).max(200) })
const teamMemberParams = z.object({ id: z.string().min(1).max(200), organisationUserId: z.string().min(1).max(200) })
const spaceUserParams = z.object({ id: z.string().min(1).max(200), organisationUserId: z.string().min(1).max(200) })
/** A space as `GET /spaces/{id}` answers it: with live counts, its actor taking the recipients just changed. */
const presentSpace = (space: SpaceJson) => Spaces.use((spaces) => spaces.present([space])).pipe(Effect.map((items) => items[0]))
const memberBody = z.object({ organisationUserId: z.string().min(1).max(200) })

/** Management tokens live an hour (RFC 6749 §4.4: no refresh token for client credentials). */
const MANAGEMENT_TOKEN_TTL_S = 3600

const forget = Auth.use((auth) => auth.forget())

/** A sign-in attempt on `account` (`user:…` or `client:…`) from this request's peer address. */
export const signInAttempt = (c: Context, account: string): SignInAttempt => ({ account, address: peerAddress(c) })

/**
 * RFC 6749 §2.3.1: HTTP Basic credentials are percent-encoded first. A malformed escape is kept
 * as it is (no client has such an id, so it is an unknown client, not a server error).
 */
const percentDecoded = (text: string): string => {
  try {
    return decodeURIComponent(text)
  } catch {
    return text
  }
}

/** RFC 6749 §5.2 error bodies: OAuth client libraries read `error` as a string. */
const oauthError = (c: Context, status: 400 | 401 | 429, error: string, description: string, headers: Record<string, string> = {}) =>
  c.json({ error, error_description: description }, status, { "Cache-Control": "no-store", ...headers })

/** The user-management interface: management clients, organisation users, teams, space alert recipients. */
export const userRoutes = (api: Api): void => {
  api.route({
    method: "post",
    path: "/managementClients",
    tag: "User management",
    summary: "Create a management client (its secret is shown once)",
    access: "admin",
    body: z.object({ name: z.string().min(1).max(200) }),
    response: managementClientSchema.extend({ clientSecret: z.string() }),
    handler: ({ principal, body }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        const now = Date.now()
        const id = newId("mcl", now)
        const clientId = `mc_${randomBytes(12).toString("hex")}`
        const clientSecret = newSecret("m_cs")
        yield* sql.query(
          `INSERT INTO management_clients (id, organisation_id, name, client_id, secret_hash, created_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $6)`,
          [id, principal.organisationId, body.name, clientId, hashSecret(clientSecret), now]
        )
        return { id, name: body.name, clientId, clientSecret, createdAt: now }
      })
  })

  api.route({
    method: "get",
    path: "/managementClients",
    tag: "User management",
    summary: "List management clients (without secrets)",
    access: "admin",
    response: z.object({ managementClients: z.array(managementClientSchema), count: z.number().int() }),
    handler: ({ principal }) =>
      Sql.use((sql) =>
        sql.query<{ id: string; name: string; client_id: string; created_at: number }>(
          "SELECT id, name, client_id, created_at FROM management_clients WHERE organisation_id = $1 ORDER BY created_at DESC",
          [principal.organisationId]
        )
      ).pipe(Effect.map((rows) =>
        listReply({
          items: rows.map((r) => ({ id: r.id, name: r.name, clientId: r.client_id, createdAt: Number(r.created_at) })),
          total: rows.length
        }, "managementClients")
      ))
  })

  api.route({
    method: "delete",
    path: "/managementClients/:id",
    tag: "User management",
    summary: "Delete a management client; its tokens stop working at once",
    access: "admin",
    params: teamParams,
    response: z.object({ id: z.string(), deleted: z.literal(true) }),
    handler: ({ principal, params }) =>
      Effect.gen(function*() {
        const rows = yield* Sql.use((sql) =>
          sql.query("DELETE FROM management_clients WHERE id = $1 AND organisation_id = $2 RETURNING id", [params.id, principal.organisationId])
        )
        if (rows.length === 0) return yield* new NotFound({ resource: "management client", id: params.id })
        yield* forget
        return { id: params.id, deleted: true }
      })
  })

  api.route({
    method: "post",
    path: "/oauth/token",
    tag: "User management",
    summary: "Exchange client credentials for a management bearer (RFC 6749 §4.4)",
    description: "grant_type=client_credentials; client_id and client_secret in the body or as HTTP Basic. " +
      "Errors follow RFC 6749 §5.2 (`{\"error\", \"error_description\"}`), which OAuth clients expect.",
    access: "public",
    response: z.object({ access_token: z.string(), token_type: z.literal("bearer"), expires_in: z.number().int() }),
    handler: ({ c }) =>
      Effect.gen(function*() {
        const raw = yield* readBody(c).pipe(Effect.catch(() => Effect.succeed({})))
        const body = Predicate.isObject(raw) ? (raw as Record<string, unknown>) : {}
        let clientId = typeof body.client_id === "string" ? body.client_id : undefined
        let clientSecret = typeof body.client_secret === "string" ? body.client_secret : undefined
        const basic = /^Basic\s+(.+)$/i.exec(c.req.header("authorization") ?? "")
        if (basic) {
          const decoded = Buffer.from(basic[1], "base64").toString("utf8")
          const colon = decoded.indexOf(":")
          if (colon > 0) {
            clientId = percentDecoded(decoded.slice(0, colon))
            clientSecret = percentDecoded(decoded.slice(colon + 1))
          }
        }
        if (body.grant_type !== "client_credentials") {
          return oauthError(c, 400, "unsupported_grant_type", "grant_type must be client_credentials")
        }
        if (clientId === undefined || clientSecret === undefined) {
          return oauthError(c, 400, "invalid_request", "client_id and client_secret are required (body or HTTP Basic)")
        }
        // No client id or secret holds NUL, and Postgres text cannot: refused before the store sees it.
        if (clientId.includes("\u0000") || clientSecret.includes("\u0000")) {
          return oauthError(c, 400, "invalid_request", "client_id and client_secret must not contain NUL")
        }
        const guard = yield* SignInGuard
        const attempt = signInAttempt(c, `client:${clientId}`)
        const refused = yield* guard.admit(attempt).pipe(
          Effect.as(undefined),
          Effect.catchTag("RateLimited", (e) => Effect.succeed(e))
        )
        if (refused !== undefined) {
          return oauthError(c, 429, "slow_down", "too many failed attempts for this client from this address; try again later", {
            "Retry-After": String(refused.retryAfterSeconds)
          })
        }
        const sql = yield* Sql
        const [client] = yield* sql.query<{ id: string; organisation_id: string; secret_hash: string }>(
          "SELECT id, organisation_id, secret_hash FROM management_clients WHERE client_id = $1",
          [clientId]
        )
        if (client === undefined || !constantTimeEqual(client.secret_hash, hashSecret(clientSecret))) {
          return oauthError(c, 401, "invalid_client", "unknown client or wrong secret", { "WWW-Authenticate": "Basic" })
        }
        yield* guard.succeeded(attempt)
        const now = Date.now()
        const token = newSecret("m_at")
        yield* sql.query(
          "INSERT INTO management_tokens (id, token_hash, client_id, organisation_id, expires_at, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
          [newId("tok", now), hashSecret(token), client.id, client.organisation_id, now + MANAGEMENT_TOKEN_TTL_S * 1000, now]
        )
        return new Reply({ access_token: token, token_type: "bearer", expires_in: MANAGEMENT_TOKEN_TTL_S }, 200, { "Cache-Control": "no-store" })
      })
  })

  api.route({
    method: "post",
    path: "/organisations/users/",
    aliases: ["/organisations/users"],
    tag: "User management",
    summary: "Create a user and add it to the organisation",
    description: "An address already registered elsewhere is added as it is; one already in this organisation is 409.",
    access: "manage",
    body: z.object({
      emailAddress: z.email({ message: "must be an e-mail address" }).max(320),
      fullName: z.string().min(1).max(200),
      password: z.string().min(8, { message: "must be at least 8 characters" }).max(1000).optional(),
      loginViaSsoOnly: bool.optional(),
      isAdmin: bool.optional()
    }),
    response: organisationUserSchema,
    handler: ({ principal, body }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        const id = yield* sql.transaction((tx) =>
          addOrganisationUser(tx, principal.organisationId, {
            emailAddress: body.emailAddress,
            fullName: body.fullName,
            password: body.password,
            loginViaSsoOnly: body.loginViaSsoOnly ?? false,
            isAdmin: body.isAdmin ?? false
          })
        )
        return yield* getOrganisationUser(sql, principal.organisationId, id)
      })
  })

  api.route({
    method: "get",
    path: "/organisations/users",
    aliases: ["/organisations/users/"],
    tag: "User management",
    summary: "List the organisation's users",
    access: "manage",
    query: z.object({
      limit: intParam(1, 200, 20),
      page: intParam(0, 1_000_000, 0),
      sort: sortParam,
      order: listParams(Object.keys(userOrder), "createdAt").order
    }),
    response: z.array(organisationUserSchema),
    handler: ({ principal, query }) =>
      Sql.use((sql) => listOrganisationUsers(sql, principal.organisationId, query)).pipe(Effect.map((page) => listReply(page)))
  })

  api.route({
    method: "get",
    path: "/organisations/:organisationUserId",
    tag: "User management",
    summary: "An organisation user with their teams",
    access: "manage",
    params: ouParams,
    response: organisationUserSchema,
    handler: ({ principal, params }) => Sql.use((sql) => getOrganisationUser(sql, principal.organisationId, params.organisationUserId))
  })

  api.route({
    method: "put",
    path: "/organisations/users/:organisationUserId",
    tag: "User management",
    summary: "Make a user an admin or not (the last admin cannot be demoted)",
    access: "manage",
    params: ouParams,
    body: z.object({ isAdmin: bool }),
    response: organisationUserSchema,
    handler: ({ principal, params, body }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        yield* sql.transaction((tx) => setAdmin(tx, principal.organisationId, params.organisationUserId, body.isAdmin))
        yield* forget
        return yield* getOrganisationUser(sql, principal.organisationId, params.organisationUserId)
      })
  })

  api.route({
    method: "delete",
    path: "/organisations/users/:organisationUserId",
    tag: "User management",
    summary: "Remove a user from the organisation and delete it",
    description: "Its team memberships, alert subscriptions and tokens go with it; its sessions close at once.",
    access: "manage",
    params: ouParams,
    response: z.object({ removed: z.literal(true) }),
    handler: ({ principal, params }) =>
      Effect.gen(function*() {
        yield* Sql.use((sql) => sql.transaction((tx) => removeOrganisationUser(tx, principal.organisationId, params.organisationUserId)))
        yield* forget
        return { removed: true }
      })
  })

  api.route({
    method: "post",
    path: "/teams/",
    aliases: ["/teams"],
    tag: "User management",
    summary: "Create a team",
    access: "manage",
    body: z.object({ organisationId: z.string().min(1).max(200), name: z.string().min(1).max(200), isAdmin: bool.optional() }),
    response: teamSchema,
    handler: ({ principal, body }) =>
      Effect.gen(function*() {
        if (body.organisationId !== principal.organisationId) {
          return yield* new NotFound({ resource: "organisation", id: body.organisationId })
        }
        const sql = yield* Sql
        const id = yield* createTeam(sql, principal.organisationId, { name: body.name, isAdmin: body.isAdmin ?? false })
        return yield* getTeam(sql, principal.organisationId, id)
      })
  })

  api.route({
    method: "get",
    path: "/teams/",
    aliases: ["/teams"],
    tag: "User management",
    summary: "List teams",
    access: "manage",
    query: z.object({ limit: intParam(1, 200, 20), page: intParam(0, 1_000_000, 0) }),
    response: z.array(teamSchema),
    handler: ({ principal, query }) => Sql.use((sql) => listTeams(sql, principal.organisationId, query)).pipe(Effect.map((page) => listReply(page)))
  })

  api.route({
    method: "get",
    path: "/teams/:id",
    tag: "User management",
    summary: "A team with its members",
    access: "manage",
    params: teamParams,
    response: teamSchema,
    handler: ({ principal, params }) => Sql.use((sql) => getTeam(sql, principal.organisationId, params.id))
  })

  api.route({
    method: "delete",
    path: "/teams/:id",
    tag: "User management",
    summary: "Delete a team",
    access: "manage",
    params: teamParams,
    response: z.object({ deleted: z.literal(true) }),
    handler: ({ principal, params }) =>
      Sql.use((sql) => deleteTeam(sql, principal.organisationId, params.id)).pipe(Effect.as({ id: params.id, deleted: true }))
  })

  api.route({
    method: "post",
    path: "/teams/:id/members",
    tag: "User management",
    summary: "Add a user to a team (adding twice is harmless)",
    access: "manage",
    params: teamParams,
    body: memberBody,
    response: teamSchema,
    handler: ({ principal, params, body }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        yield* addTeamMember(sql, principal.organisationId, params.id, body.organisationUserId)
        return yield* getTeam(sql, principal.organisationId, params.id)
      })
  })

  api.route({
    method: "delete",
    path: "/teams/:id/members",
    tag: "User management",
    summary: "Remove a user from a team (user in the body)",
    access: "manage",
    params: teamParams,
    body: memberBody,
    response: z.object({ deleted: z.literal(true) }),
    handler: ({ principal, params, body }) =>
      Sql.use((sql) => removeTeamMember(sql, principal.organisationId, params.id, body.organisationUserId)).pipe(
        Effect.as({ deleted: true })
      )
  })

  api.route({
    method: "delete",
    path: "/teams/:id/members/:organisationUserId",
    tag: "User management",
    summary: "Remove a user from a team",
    access: "manage",
    params: teamMemberParams,
    response: z.object({ deleted: z.literal(true) }),
    handler: ({ principal, params }) =>
      Sql.use((sql) => removeTeamMember(sql, principal.organisationId, params.id, params.organisationUserId)).pipe(
        Effect.as({ deleted: true })
      )
  })

  api.route({
    method: "post",
    path: "/spaces/:id/alerts/users/:organisationUserId",
    tag: "User management",
    summary: "Add a user to the space's alert recipients",
    access: "manage",
    params: spaceUserParams,
    response: spaceSchema,
    handler: ({ principal, params }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        yield* addSpaceAlertUser(sql, principal.organisationId, params.id, params.organisationUserId)
        return yield* presentSpace(yield* getOne(sql, spaceQuery, principal.organisationId, params.id))
      })
  })

  api.route({
    method: "delete",
    path: "/spaces/:id/alerts/users/:organisationUserId",
    tag: "User management",
    summary: "Remove a user from the space's alert recipients",
    access: "manage",
    params: spaceUserParams,
    response: spaceSchema,
    handler: ({ principal, params }) =>
      Effect.gen(function*() {
        const sql = yield* Sql
        yield* removeSpaceAlertUser(sql, principal.organisationId, params.id, params.organisationUserId)
        return yield* presentSpace(yield* getOne(sql, spaceQuery, principal.organisationId, params.id))
      })
  })
}
