import { z } from "@hono/zod-openapi"
import { Effect, Predicate } from "effect"
import { randomBytes } from "node:crypto"
import type { Context } from "hono"
import { Auth } from "../../../auth/Auth.ts"
import { constantTimeEqual, hashSecret } from "../../../auth/secrets.ts"
import { type SignInAttempt, SignInGuard } from "../../../auth/SignInGuard.ts"
import { NotFound } from "../../../domain/errors.ts"
import { newId, newSecret } from "../../../domain/ids.ts"
import { Sql } from "../../../store/Sql.ts"
import { readBody } from "../body.ts"
import { peerAddress } from "../errors.ts"
import { idParams } from "../params.ts"
import { type Api, listReply, Reply } from "../route.ts"

const managementClientSchema = z.object({ id: z.string(), name: z.string(), clientId: z.string(), createdAt: z.number().int() })

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

/** Management clients and their tokens (`POST /oauth/token`, client credentials, RFC 6749 §4.4). */
export const managementRoutes = (api: Api): void => {
  api.route({
    method: "post",
    path: "/managementClients",
    tag: "User management",
    summary: "Create a management client (its secret is shown once)",
    access: "admin",
    body: z.object({ name: z.string().min(1).max(200) }),
    response: managementClientSchema.extend({ clientSecret: z.string() }),
    handle: function*({ principal, body }) {
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
    }
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
    params: idParams,
    response: z.object({ id: z.string(), deleted: z.literal(true) }),
    handle: function*({ principal, params }) {
      const rows = yield* Sql.use((sql) =>
        sql.query("DELETE FROM management_clients WHERE id = $1 AND organisation_id = $2 RETURNING id", [params.id, principal.organisationId])
      )
      if (rows.length === 0) return yield* new NotFound({ resource: "management client", id: params.id })
      yield* forget
      return { id: params.id, deleted: true }
    }
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
    handle: function*({ c }) {
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
    }
  })
}
