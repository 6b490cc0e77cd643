import { randomBytes } from "node:crypto"
import type { Context } from "hono"
import { routePath } from "hono/route"
import type { Principal } from "../../auth/Principal.ts"

/**
 * What the log lines about one HTTP request carry (`LOG_FORMAT=json` shows them as fields): its
 * id, the route that took it, who sent it, and the device it is about.
 *
 * The id is the client's `x-request-id` when it sent a plausible one (a proxy's or a load
 * balancer's, so one id follows the request across both logs), else one made here; either way
 * the answer carries it back in `x-request-id`, so a client quoting it finds the line.
 */
interface RequestLog {
  readonly requestId: string
  principal?: Principal
}

/**
 * Kept in the request's own context variables, not in a WeakMap keyed by it: a WeakMap's
 * entries are ephemerons, which every scavenge walks until a full GC clears them, and at
 * 1,000 requests/s they lengthened the pauses that set the tail (bench:ingest's command case).
 */
const KEY = "voltaic.requestLog"
const logOf = (c: Context): RequestLog | undefined => c.get(KEY) as RequestLog | undefined

const PLAUSIBLE_ID = /^[\w.:-]{1,64}$/

/**
 * Ids made here: this process's random prefix and a counter, unique across processes without
 * drawing random bytes for every request.
 */
const PREFIX = `req_${randomBytes(6).toString("base64url")}`
let made = 0

/** Starts a request's log context; answers its id. */
export const beginRequest = (c: Context): string => {
  const sent = c.req.header("x-request-id")
  const requestId = sent !== undefined && PLAUSIBLE_ID.test(sent) ? sent : `${PREFIX}${(++made).toString(36)}`
  c.set(KEY, { requestId } satisfies RequestLog)
  return requestId
}

/** The principal the request authenticated as, for its later log lines. */
export const notePrincipal = (c: Context, principal: Principal) => {
  const log = logOf(c)
  if (log !== undefined) log.principal = principal
}

/** The route as registered (`/v1/devices/:id`), or "unmatched" when no route took the request. */
export const routeOf = (c: Context): string => {
  const route = routePath(c, -1)
  return route === "" || route.endsWith("*") ? "unmatched" : route
}

/** Log annotations of a request: requestId, route, and principal and deviceId where known. */
export const requestAnnotations = (c: Context): Record<string, string> => {
  const log = logOf(c)
  const out: Record<string, string> = {}
  if (log !== undefined) out.requestId = log.requestId
  out.route = routeOf(c)
  const principal = log?.principal
  if (principal !== undefined) out.principal = `${principal.kind}:${principal.id}`
  const deviceId = principal?.kind === "device" ? principal.id : out.route.startsWith("/v1/devices/:id") ? c.req.param("id") : undefined
  if (deviceId !== undefined) out.deviceId = deviceId
  return out
}
