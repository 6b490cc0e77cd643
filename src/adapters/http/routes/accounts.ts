import { z } from "@hono/zod-openapi"
import { Effect } from "effect"
import { Auth } from "../../../auth/Auth.ts"
import { SignInGuard } from "../../../auth/SignInGuard.ts"
import { signInAttempt } from "./management.ts"
import { InvalidInput, Unauthorized } from "../../../domain/errors.ts"
import {
  deleteApiKey,
  insertApiKey,
  insertOrganisation,
  organisationName,
  refresh,
  revokeToken,
  signIn,
  toApiKey
} from "../../../store/accounts.ts"
import { listRows } from "../../../store/crud.ts"
import { Sql } from "../../../store/Sql.ts"
import { idParams, listParams } from "../params.ts"
import { type Api, listReply, Reply } from "../route.ts"
import {
  apiKeySchema,
  createApiKeyBody,
  createdApiKeySchema,
  createdOrganisationSchema,
  createOrganisationBody,
  deletedSchema,
  revokeBody,
  signInBody,
  tokenBody,
  tokenSchema,
  whoamiSchema
} from "../schemas.ts"

const DEPRECATED = { Deprecation: "true" }
const apiKeyOrder = { createdAt: "k.created_at", name: "k.name", id: "k.id" } as const

/** Organisations, application keys, the deprecated user tokens and `/whoami`. */
export const accountRoutes = (api: Api): void => {
  api.route({
    method: "get",
    path: "/whoami",
    tag: "Authentication",
    summary: "Who the credential belongs to",
    access: "any",
    response: whoamiSchema,
    handle: function*({ principal }) {
      const sql = yield* Sql
      const organisation = { id: principal.organisationId, name: yield* organisationName(sql, principal.organisationId) }
      switch (principal.kind) {
        case "device":
          return { id: principal.id, kind: "device", scope: "device", organisation, device: { id: principal.id } }
        case "app":
          return {
            id: principal.id,
            kind: "app",
            scope: principal.readOnly ? "read" : "application",
            organisation,
            apiKey: { id: principal.id, readOnly: principal.readOnly }
          }
        case "management":
          return { id: principal.id, kind: "management", scope: "management", organisation }
        case "user":
          return {
            id: principal.id,
            kind: "user",
            scope: principal.scope,
            organisation,
            user: {
              id: principal.id,
              organisationUserId: principal.organisationUserId,
              emailAddress: principal.emailAddress,
              isAdmin: principal.isAdmin
            }
          }
      }
    }
  })

  api.route({
    method: "post",
    path: "/organisations",
    tag: "Organisations",
    summary: "Create an organisation with its owner and first application key",
    description: "Platform administrator only. The application key's secret is shown only in this response.",
    access: "platform",
    body: createOrganisationBody,
    response: createdOrganisationSchema,
    handler: ({ body }) =>
      Sql.use((sql) => sql.transaction((tx) => insertOrganisation(tx, { name: body.name, isPlatform: false, owner: body.owner }))).pipe(
        Effect.map((created) => ({
          organisation: created.organisation,
          owner: created.owner,
          apiKey: { id: created.apiKey.id, secretKey: created.apiKey.secretKey }
        }))
      )
  })

  api.route({
    method: "post",
    path: "/apiKeys",
    tag: "Authentication",
    summary: "Create an application key",
    description: "The secret is shown only in this response. A read-only key may only read.",
    access: "admin",
    body: createApiKeyBody,
    response: createdApiKeySchema,
    handler: ({ principal, body }) =>
      Sql.use((sql) => insertApiKey(sql, principal.organisationId, { name: body.name, readOnly: body.readOnly ?? false }))
  })

  api.route({
    method: "get",
    path: "/apiKeys",
    tag: "Authentication",
    summary: "List application keys (without secrets)",
    access: "admin",
    query: z.object(listParams(Object.keys(apiKeyOrder), "createdAt")),
    response: z.object({ apiKeys: z.array(apiKeySchema), count: z.number().int() }),
    handle: function*({ principal, query }) {
      const sql = yield* Sql
      const page = yield* listRows(sql, {
        select: "k.*",
        from: "api_keys k",
        base: "api_keys k",
        alias: "k",
        where: ["k.organisation_id = $1"],
        params: [principal.organisationId],
        timeColumn: "k.created_at"
      }, { ...query, orderBy: apiKeyOrder[query.order as keyof typeof apiKeyOrder] })
      return listReply({ items: page.items.map(toApiKey), total: page.total }, "apiKeys")
    }
  })

  api.route({
    method: "delete",
    path: "/apiKeys/:id",
    tag: "Authentication",
    summary: "Delete an application key; it stops working at once",
    access: "admin",
    params: idParams,
    response: deletedSchema,
    handle: function*({ principal, params }) {
      yield* Sql.use((sql) => deleteApiKey(sql, principal.organisationId, params.id))
      yield* Auth.use((auth) => auth.forget())
      return { id: params.id, deleted: true }
    }
  })

  api.route({
    method: "post",
    path: "/auth/token",
    tag: "Authentication",
    summary: "Sign a user in (deprecated)",
    description: "Header x-app-key names the application; the user must belong to its organisation.",
    deprecated: true,
    access: "public",
    body: tokenBody,
    response: tokenSchema,
    handle: function*({ c, body }) {
      const appKey = c.req.header("x-app-key")
      if (appKey === undefined || appKey === "") {
        return yield* new Unauthorized({ message: "x-app-key: an application key is required" })
      }
      const app = yield* Auth.use((auth) => auth.authenticate(appKey))
      if (app.kind !== "app") return yield* new Unauthorized({ message: "x-app-key: must be an application key (a_sk_…)" })
      const sql = yield* Sql
      const grantType = body.grantType ?? "password"
      if (grantType === "refresh_token") {
        if (body.refreshToken === undefined) return yield* new InvalidInput({ field: "refreshToken", message: "refreshToken: is required" })
        return new Reply(yield* refresh(sql, app.organisationId, body.refreshToken), 200, DEPRECATED)
      }
      if (body.username === undefined) return yield* new InvalidInput({ field: "username", message: "username: is required" })
      if (body.password === undefined) return yield* new InvalidInput({ field: "password", message: "password: is required" })
      const guard = yield* SignInGuard
      const attempt = signInAttempt(c, `user:${body.username}`)
      yield* guard.admit(attempt)
      const token = yield* signIn(sql, app.organisationId, {
        username: body.username,
        password: body.password,
        scope: body.scope ?? "user"
      })
      yield* guard.succeeded(attempt)
      return new Reply(token, 200, DEPRECATED)
    }
  })

  api.route({
    method: "post",
    path: "/auth/signIn",
    tag: "Authentication",
    summary: "Sign a user in by e-mail and password (the console's sign-in)",
    description: "No application key needed: the user's organisation is theirs (organisationId names one when they " +
      "belong to several). Answers the same user token as POST /auth/token, throttled the same way; revoke it with " +
      "POST /auth/token/revoke.",
    access: "public",
    body: signInBody,
    response: tokenSchema,
    handle: function*({ c, body }) {
      const guard = yield* SignInGuard
      const attempt = signInAttempt(c, `user:${body.emailAddress}`)
      yield* guard.admit(attempt)
      const token = yield* Sql.use((sql) =>
        signIn(sql, body.organisationId, { username: body.emailAddress, password: body.password, scope: "user" })
      )
      yield* guard.succeeded(attempt)
      return token
    }
  })

  api.route({
    method: "post",
    path: "/auth/token/revoke",
    tag: "Authentication",
    summary: "Revoke a user token (deprecated)",
    description: "Revokes it everywhere at once: REST, MQTT and WebSocket.",
    deprecated: true,
    access: "public",
    body: revokeBody,
    response: z.object({ revoked: z.boolean() }),
    handle: function*({ body }) {
      const revoked = yield* Sql.use((sql) => revokeToken(sql, body.token))
      yield* Auth.use((auth) => auth.forget())
      return new Reply({ revoked }, 200, DEPRECATED)
    }
  })
}
