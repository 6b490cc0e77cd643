import { OpenAPIHono } from "@hono/zod-openapi"
import { ServerResponse } from "node:http"
import type { Context as HonoContext } from "hono"
import { Scalar } from "@scalar/hono-api-reference"
import { Cause, Context, Effect, Exit, Option, Redacted } from "effect"
import { bodyLimit } from "hono/body-limit"
import { HTTPException } from "hono/http-exception"
import { methodNotAllowed } from "hono/method-not-allowed"
import { Bus } from "../../bus/Bus.ts"
import { RUNNER_PATH, RunnerEndpoint, SECRET_HEADER, sameSecret } from "../../cluster/Cluster.ts"
import { AppConfig } from "../../config.ts"
import { observeHttp, scrape, setRecording } from "../../metrics.ts"
import { Sql } from "../../store/Sql.ts"
import { printable } from "../logLine.ts"
import { CONSOLE_ASSETS_PREFIX, type ConsoleRequest, consoleAsset, consoleIndex, consoleRoute } from "./consoleAssets.ts"
import { DOCS_SCRIPT_PATH, docsScript } from "./docsBundle.ts"
import { makeLiveFeed } from "./liveFeed.ts"
import { isRefusal, refusalLine, sendStatus } from "./errors.ts"
import { beginRequest, requestAnnotations, routeOf } from "./requestLog.ts"
import { Api, type HttpServices } from "./route.ts"
import { StaticFirstRouter } from "./staticFirstRouter.ts"
import { accountRoutes } from "./routes/accounts.ts"
import { registryRoutes } from "./routes/registry.ts"
import { alertRoutes } from "./routes/alerts.ts"
import { energyRoutes } from "./routes/energy.ts"
import { commandRoutes } from "./routes/commands.ts"
import { trafficRoutes } from "./routes/traffic.ts"
import { managementRoutes } from "./routes/management.ts"
import { streamRoutes } from "./routes/stream.ts"
import { userRoutes } from "./routes/users.ts"

/** No request body may exceed this, whatever the route; routes set smaller limits. */
const MAX_REQUEST_BODY = 16 * 1024 * 1024

/** Node's answer to the request (`@hono/node-server` passes `{incoming, outgoing}` as `env`); none on Deno or in `app.request`. */
const nodeAnswer = (env: unknown): ServerResponse | undefined =>
  typeof env === "object" && env !== null && "outgoing" in env && env.outgoing instanceof ServerResponse ? env.outgoing : undefined

/** An unread body up to this is drained at once, and its connection kept. */
const UNREAD_BODY_KEEP_ALIVE = 64 * 1024

/**
 * The Hono application: `/health`, `/ready`, `/docs`, the REST API under `/v1` with its
 * OpenAPI document at `/v1/openapi.json`, and the operator console at `/`. It never listens;
 * the entry point serves it.
 */
export const makeHttpApp = Effect.gen(function*() {
  const context = yield* Effect.context<HttpServices>()
  const sql = Context.get(context, Sql)
  const bus = Option.getOrUndefined(yield* Effect.serviceOption(Bus))
  const runner = Option.getOrUndefined(yield* Effect.serviceOption(RunnerEndpoint))
  const config = yield* AppConfig
  const metrics = config.metrics === "on"
  setRecording(metrics)

  // Every route of `v1` is copied into `app`'s router when mounted: `app`'s is the one that matches.
  const app = new OpenAPIHono({ router: new StaticFirstRouter() })
  const v1 = new OpenAPIHono()
  const api = new Api(v1, context)

  const otherMethods = methodNotAllowed({
    app,
    onMethodNotAllowed: (c, methods) =>
      sendStatus(c, 405, "method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}; use ${methods.join(", ")}`, {
        Allow: methods.join(", ")
      })
  })
  const answered = () => Promise.resolve()
  // A refusal is the client's business, not a fault here: info, with its reason; a 404 outside
  // the API (a browser's /favicon.ico, a scanner's probes) at debug.
  const logRefusal = (c: HonoContext, line: string, quiet: boolean) =>
    Effect.runSyncWith(context)((quiet ? Effect.logDebug(line) : Effect.logInfo(line)).pipe(Effect.annotateLogs(requestAnnotations(c))))
  // Outermost, so it sees every request's final answer, whoever gave it (a route, the body
  // limit below, onError, notFound). A success costs a status check, as Hono's
  // methodNotAllowed alone did. A 404 for a path served under other methods becomes 405
  // (methodNotAllowed run after the fact), and then each refusal (4xx) is logged once.
  app.use(async (c, next) => {
    const started = performance.now()
    const requestId = beginRequest(c)
    // On Node the id goes on the socket's answer itself, merged into whatever answer is written:
    // reading `c.res.headers` afterwards turns the answer's plain header object into a Headers,
    // which @hono/node-server then copies, sorts and writes by its slower path (every request).
    const outgoing = nodeAnswer(c.env)
    outgoing?.setHeader("x-request-id", requestId)
    await next()
    if (outgoing === undefined) {
      try {
        c.res.headers.set("x-request-id", requestId)
      } catch {
        // An answer with immutable headers (a fetch Response passed through) goes without it.
      }
    }
    // The handler's route as registered; a request no route took (a 404, a 405) is "unmatched".
    if (metrics) observeHttp(c.req.method, routeOf(c), c.res.status, (performance.now() - started) / 1000)
    if (!isRefusal(c.res.status)) return
    if (c.res.status === 404) await otherMethods(c, answered)
    logRefusal(c, await refusalLine(c), c.res.status === 404 && !c.req.path.startsWith("/v1/"))
  })
  // Only where a body may come: reading `c.req.raw.body` builds a full Request, which costs
  // about 75 µs on every GET (bench/RESULTS.md, "Where the time goes").
  const tooLarge = (c: HonoContext) => sendStatus(c, 413, "payload_too_large", `body: larger than ${MAX_REQUEST_BODY} bytes`)
  const limitBody = bodyLimit({ maxSize: MAX_REQUEST_BODY, onError: tooLarge })
  app.use(async (c, next) => {
    if (c.req.method === "GET" || c.req.method === "HEAD") return next()
    const declared = c.req.header("content-length")
    // A declared length is enforced by Node's parser, so it is checked here and the body left
    // as it is; only a chunked body is counted as it streams (Hono's bodyLimit wraps it, and
    // a wrapped body left unread when the answer goes out costs the connection).
    if (declared === undefined) {
      // bodyLimit answers an oversized stream by returning its response, not by setting it;
      // the rest of the stream is left unread, so the connection is not kept either.
      const refused = await limitBody(c, next)
      if (refused instanceof Response) {
        c.res = refused
        c.res.headers.set("connection", "close")
      }
    } else if (Number(declared) > MAX_REQUEST_BODY) c.res = tooLarge(c)
    else await next()
    // Refused before the body was read (401, 403, 413, …): Node drains what is left only for
    // a while and then drops the socket, so a client reusing it would lose its next request.
    // Saying so lets it open a new connection instead.
    if (c.res.status >= 400 && !c.req.raw.bodyUsed && (declared === undefined || Number(declared) > UNREAD_BODY_KEEP_ALIVE)) {
      c.res.headers.set("connection", "close")
    }
  })

  const health = () => ({ status: "ok" })
  /** Why this process should not take traffic now, if it should not: a lost store or bus. */
  const notReady = async (): Promise<string | undefined> => {
    const exit = await Effect.runPromiseExit(Effect.timeout(sql.query("SELECT 1"), "2 seconds"))
    if (Exit.isFailure(exit)) return "the store is not reachable"
    // Without the bus, live deliveries and credential notices of other processes are lost.
    if (bus !== undefined && !bus.connected()) return "the bus (NATS) is not reachable"
    return undefined
  }
  for (const prefix of ["", "/v1"]) {
    app.get(`${prefix}/health`, (c) => c.json(health()))
    app.get(`${prefix}/ready`, async (c) => {
      const why = await notReady()
      return why === undefined ? c.json({ status: "ready" }) : sendStatus(c, 503, "unavailable", why, { "Retry-After": "1" })
    })
  }

  if (metrics) {
    const token = Option.map(config.metricsToken, Redacted.value)
    app.get("/metrics", (c) => {
      if (Option.isSome(token) && !sameSecret(/^Bearer (.+)$/i.exec(c.req.header("authorization") ?? "")?.[1], token.value)) {
        return sendStatus(c, 401, "unauthorized", "/metrics: send Authorization: Bearer <METRICS_TOKEN>", { "WWW-Authenticate": "Bearer" })
      }
      return c.body(scrape(), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" })
    })
  }

  if (runner !== undefined) {
    // Other runners' calls (Postgres clusters): their client posts to `${RUNNER_PATH}/`. Without
    // the shared secret the endpoint does not exist.
    const serve = (c: HonoContext) =>
      sameSecret(c.req.header(SECRET_HEADER), runner.secret)
        ? runner.handle(c.req.raw)
        : sendStatus(c, 404, "not_found", `no route for ${c.req.method} ${c.req.path}`)
    app.post(RUNNER_PATH, serve)
    app.post(`${RUNNER_PATH}/`, serve)
  }

  accountRoutes(api)
  managementRoutes(api)
  userRoutes(api)
  registryRoutes(api)
  trafficRoutes(api)
  commandRoutes(api)
  alertRoutes(api)
  energyRoutes(api)
  streamRoutes(api, bus === undefined ? undefined : makeLiveFeed(bus))

  let document: unknown
  v1.get("/openapi.json", (c) => {
    document ??= v1.getOpenAPI31Document({
      openapi: "3.1.0",
      info: {
        title: "Voltaic",
        version: "1.0.0",
        description: "Self-hosted IoT and energy-monitoring backend. REST under /v1; MQTT and CoAP for devices."
      },
      servers: [{ url: "/" }]
    })
    return c.json(document)
  })
  app.route("/v1", v1)
  // The reference's script and fonts from Voltaic itself (no CDN): /docs renders offline.
  app.get(DOCS_SCRIPT_PATH, (c) => docsScript(c.req.header("accept-encoding")))
  app.get("/docs", Scalar({ url: "/v1/openapi.json", pageTitle: "Voltaic API", cdn: DOCS_SCRIPT_PATH, withDefaultFonts: false, defaultOpenAllTags: true }))

  // The operator console (console/, built into dist/console): its page, its hashed assets, and
  // its client-side routes for a browser asking for HTML (the rest of the notFound below).
  const consoleRequest = (c: HonoContext): ConsoleRequest => ({
    method: c.req.method,
    path: c.req.path,
    accept: c.req.header("accept"),
    acceptEncoding: c.req.header("accept-encoding")
  })
  app.get("/", (c) => consoleIndex(consoleRequest(c)))
  app.get(`${CONSOLE_ASSETS_PREFIX}*`, async (c) =>
    (await consoleAsset(consoleRequest(c))) ?? sendStatus(c, 404, "not_found", `no route for ${c.req.method} ${c.req.path}`))

  app.notFound(async (c) =>
    (await consoleRoute(consoleRequest(c))) ?? sendStatus(c, 404, "not_found", `no route for ${c.req.method} ${c.req.path}`))
  app.onError((err, c) => {
    if (err instanceof HTTPException) {
      return sendStatus(c, err.status === 413 ? 413 : 400, err.status === 413 ? "payload_too_large" : "invalid_request", err.message)
    }
    Effect.runSyncWith(context)(
      Effect.logError(printable(`http ${c.req.method} ${c.req.path} failed`), Cause.die(err)).pipe(Effect.annotateLogs(requestAnnotations(c)))
    )
    return sendStatus(c, 500, "internal", "the server failed to answer this request; it has been logged")
  })
  return app
})
