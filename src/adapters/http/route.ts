import { type OpenAPIHono, z } from "@hono/zod-openapi"
import { Cause, Effect, Exit, type Context as EffectContext } from "effect"
import type { Context } from "hono"
import type { ContentfulStatusCode } from "hono/utils/http-status"
import { type Access, allows, type Principal } from "../../auth/Principal.ts"
import { Auth } from "../../auth/Auth.ts"
import { type DomainError, Forbidden, InvalidInput } from "../../domain/errors.ts"
import { isConnectionLoss, type Sql, type SqlError, storeLost } from "../../store/Sql.ts"
import type { Ingest } from "../../ingest/Ingest.ts"
import type { SignInGuard } from "../../auth/SignInGuard.ts"
import type { DeviceOwners } from "../../entities/DeviceOwners.ts"
import type { ResidentSpaces } from "../../entities/residents.ts"
import type { Sharding } from "effect/cluster"
import type { DeviceReads } from "../../store/DeviceReads.ts"
import { screen } from "../../ingest/payload.ts"
import { printable } from "../logLine.ts"
import { parseInput } from "../validation.ts"
import { readBody } from "./body.ts"
import { sendError, sendStatus } from "./errors.ts"
import { notePrincipal, requestAnnotations } from "./requestLog.ts"

export type HttpServices = Sql | Auth | Ingest | SignInGuard | DeviceOwners | Sharding.Sharding | DeviceReads | ResidentSpaces

/** A non-default reply: status, headers, or a body that is not JSON. */
export class Reply {
  constructor(
    readonly body: unknown,
    readonly status: ContentfulStatusCode = 200,
    readonly headers: Record<string, string> = {}
  ) {}
}

/** A 200 whose JSON body is already text (a cached read): sent as is, not stringified again. */
export class JsonText {
  constructor(readonly text: string, readonly headers: Record<string, string> = {}) {}
}

type AnyObject = z.ZodType<Record<string, unknown>, Record<string, unknown>>

export interface Input<P, Q, B, A extends Access | "public"> {
  readonly principal: A extends "public" ? Principal | undefined : Principal
  readonly params: P
  readonly query: Q
  readonly body: B
  readonly c: Context
}

export interface RouteSpec<P extends AnyObject, Q extends AnyObject, B extends z.ZodType, A extends Access | "public"> {
  readonly method: "get" | "post" | "put" | "delete"
  /** Hono syntax (`/devices/:id`), relative to `/v1`. */
  readonly path: string
  readonly tag: string
  readonly summary: string
  readonly description?: string
  readonly access: A
  readonly params?: P
  readonly query?: Q
  readonly body?: B
  readonly response: z.ZodType
  /** The media type of a success (default application/json), as the OpenAPI document gives it. */
  readonly responseType?: string
  readonly deprecated?: boolean
  /** Bytes the body may have (default 1 MiB). */
  readonly bodyLimit?: number
  /** A body the handler reads itself (bulk uploads), documented by media type only. */
  readonly rawBody?: { readonly schema: z.ZodType; readonly mediaTypes: ReadonlyArray<string> }
  /** Further paths served by the same handler, undocumented (`/teams` for `/teams/`). */
  readonly aliases?: ReadonlyArray<string>
  readonly handler: (
    input: Input<z.output<P>, z.output<Q>, z.output<B>, A>
  ) => Effect.Effect<unknown, DomainError | SqlError, HttpServices>
}

/** `Authorization: Bearer …` (empty counts as absent), else `?access_token=`, else `x-app-key`. */
export const credentialOf = (c: Context): string | undefined => {
  const header = c.req.header("authorization")
  if (header !== undefined) {
    const match = /^Bearer\s+(.*)$/i.exec(header.trim())
    if (match && match[1].trim() !== "") return match[1].trim()
  }
  const query = c.req.query("access_token")
  if (query !== undefined && query !== "") return query
  const appKey = c.req.header("x-app-key")
  return appKey !== undefined && appKey !== "" ? appKey : undefined
}

/** `schema` applied to a request part; an issue about the whole part names `root`. */
export const validate = <S extends z.ZodType>(schema: S | undefined, value: unknown, root: string) => {
  if (schema === undefined) return Effect.succeed(undefined as z.output<S>)
  const result = parseInput(schema, value, root)
  return result instanceof InvalidInput ? Effect.fail(result) : Effect.succeed(result)
}

/** Path and query parameters under the payload policy (`screen`): no NUL, no lone surrogate, no reserved key. */
const policy = <T>(value: T, root: string): Effect.Effect<T, InvalidInput> => {
  const breach = screen(value, root)
  return breach === undefined ? Effect.succeed(value) : Effect.fail(breach)
}

const toOpenApiPath = (path: string) => `/v1${path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`

const errorSchema = z.object({
  error: z.object({ status: z.number().int(), code: z.string(), message: z.string(), field: z.string().optional() })
}).openapi("Error")

/**
 * The REST surface: each route is mounted on Hono with its validation and access rule,
 * and registered in the OpenAPI registry from the same zod schemas.
 */
export class Api {
  constructor(
    readonly app: OpenAPIHono,
    readonly context: EffectContext.Context<HttpServices>
  ) {
    this.app.openAPIRegistry.registerComponent("securitySchemes", "bearer", {
      type: "http",
      scheme: "bearer",
      description: "Application key (a_sk_…), device secret key (d_sk_…) or user access token (u_at_…)"
    })
  }

  route<P extends AnyObject, Q extends AnyObject, B extends z.ZodType, A extends Access | "public">(
    spec: RouteSpec<P, Q, B, A>
  ): void {
    const run = Effect.runPromiseExitWith(this.context)
    const needsBody = spec.body !== undefined
    const program = (c: Context) =>
      Effect.gen(function*() {
        let principal: Principal | undefined
        if (spec.access !== "public") {
          const auth = yield* Auth
          principal = yield* auth.authenticate(credentialOf(c))
          notePrincipal(c, principal)
          if (!allows(principal, spec.access)) {
            return yield* new Forbidden({ message: forbiddenMessage(principal, spec.access) })
          }
        }
        const params = yield* validate(spec.params, yield* policy(c.req.param(), "path"), "path")
        const query = yield* validate(spec.query, yield* policy(c.req.query(), "query"), "query")
        const body = needsBody ? yield* validate(spec.body, yield* readBody(c, spec.bodyLimit), "body") : undefined
        return yield* spec.handler({
          principal: principal as Input<unknown, unknown, unknown, A>["principal"],
          params: params as z.output<P>,
          query: query as z.output<Q>,
          body: body as z.output<B>,
          c
        })
      })

    this.app.on(spec.method.toUpperCase(), [spec.path, ...(spec.aliases ?? [])], async (c) => {
      const exit = await run(program(c))
      if (Exit.isSuccess(exit)) {
        const value = exit.value
        if (value instanceof JsonText) return c.body(value.text, 200, { ...value.headers, "content-type": "application/json" })
        if (value instanceof Response) return value
        return value instanceof Reply ? c.json(value.body, value.status, value.headers) : c.json(value, 200)
      }
      const failure = exit.cause.reasons.find(Cause.isFailReason)
      if (failure !== undefined && failure.error._tag !== "SqlError") return sendError(c, failure.error)
      if (failure !== undefined && failure.error._tag === "SqlError" && isConnectionLoss(failure.error)) return sendError(c, storeLost)
      await run(Effect.logError(printable(`http ${c.req.method} ${c.req.path} failed`), exit.cause).pipe(Effect.annotateLogs(requestAnnotations(c))))
      return sendStatus(c, 500, "internal", "the server failed to answer this request; it has been logged")
    })

    this.app.openAPIRegistry.registerPath({
      method: spec.method,
      path: toOpenApiPath(spec.path),
      tags: [spec.tag],
      summary: spec.summary,
      description: spec.description,
      deprecated: spec.deprecated,
      security: spec.access === "public" ? [] : [{ bearer: [] }],
      request: {
        params: spec.params as z.ZodObject | undefined,
        query: spec.query as z.ZodObject | undefined,
        body: spec.body === undefined ? rawBodyDoc(spec.rawBody) : {
          content: {
            "application/json": { schema: spec.body },
            "application/x-www-form-urlencoded": { schema: spec.body }
          }
        }
      },
      responses: {
        200: { description: "Success", content: { [spec.responseType ?? "application/json"]: { schema: spec.response } } },
        400: { description: "Invalid input; the message names the field", content: { "application/json": { schema: errorSchema } } },
        ...(spec.access === "public" ? {} : {
          401: { description: "Missing or invalid credential", content: { "application/json": { schema: errorSchema } } },
          403: { description: "Credential without the right", content: { "application/json": { schema: errorSchema } } }
        }),
        404: { description: "Unknown id, or an id of another organisation", content: { "application/json": { schema: errorSchema } } }
      }
    })
  }
}

const rawBodyDoc = (raw: RouteSpec<AnyObject, AnyObject, z.ZodType, Access>["rawBody"]) =>
  raw === undefined ? undefined : { content: Object.fromEntries(raw.mediaTypes.map((type) => [type, { schema: raw.schema }])) }

const forbiddenMessage = (principal: Principal, access: Access): string => {
  if (principal.kind === "device") return "a device key may only publish as its device and read itself"
  if (principal.kind === "management") return "a management token serves the user-management interface only"
  if (principal.kind === "app" && principal.readOnly) return "this application key is read-only"
  if (access === "platform") return "only the platform administrator may do this"
  return "only an organisation admin may do this"
}

/** Lists: a bare array where the interface says "array of", else `{<plural>, count}`; both send X-Total-Count. */
export const listReply = <T>(page: { items: Array<T>; total: number }, plural?: string): Reply =>
  new Reply(plural === undefined ? page.items : { [plural]: page.items, count: page.total }, 200, {
    "X-Total-Count": String(page.total)
  })
