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
import { formValues, parseInput } from "../validation.ts"
import { isForm, readBody } from "./body.ts"
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

type RouteInput<P extends AnyObject, Q extends AnyObject, B extends z.ZodType, A extends Access | "public"> = Input<z.output<P>, z.output<Q>, z.output<B>, A>

/**
 * What answers a route: `handle`, a generator function (the usual case), or `handler`, a
 * function that returns an effect. Prefer `handle` over `handler: (input) => Effect.gen(…)`:
 * V8 gives each generator closure its own map in old space, which keeps what the closure
 * captured (the request: its context, body, principal) until a full GC, so a closure made per
 * request made every request survive its scavenges. `handle` is made into one function per
 * route (`Effect.fnUntraced`). bench:ingest's command case: 6.1 MB promoted per scavenge at
 * 1,000 runs/s, pauses 11–19 ms, before.
 */
type Handling<P extends AnyObject, Q extends AnyObject, B extends z.ZodType, A extends Access | "public"> =
  | {
    readonly handle: (input: RouteInput<P, Q, B, A>) => Effect.fn.Return<unknown, DomainError | SqlError, HttpServices>
    readonly handler?: never
  }
  | {
    readonly handler: (input: RouteInput<P, Q, B, A>) => Effect.Effect<unknown, DomainError | SqlError, HttpServices>
    readonly handle?: never
  }

export type RouteSpec<P extends AnyObject, Q extends AnyObject, B extends z.ZodType, A extends Access | "public"> = RouteFields<P, Q, B, A> & Handling<P, Q, B, A>

interface RouteFields<P extends AnyObject, Q extends AnyObject, B extends z.ZodType, A extends Access | "public"> {
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
    const handler = spec.handle !== undefined ? Effect.fnUntraced(spec.handle) : spec.handler
    // One generator function per route, not one per request: V8 gives each generator closure
    // its own map in old space, which holds what the closure captured (the request) until a
    // full GC; a closure made per request made every request survive its scavenges.
    const program = Effect.fnUntraced(function*(c: Context) {
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
      const raw = needsBody ? yield* readBody(c, spec.bodyLimit) : undefined
      const body = needsBody ? yield* validate(spec.body, spec.body !== undefined && isForm(c) ? formValues(spec.body, raw) : raw, "body") : undefined
      return yield* handler({
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
