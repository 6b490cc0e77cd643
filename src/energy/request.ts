/**
 * Energy requests as the route hands them over, and resolved: scope, time zone and range
 * with every default applied — what a continuation token carries (token.ts) and a page is
 * computed from (query.ts).
 */
import { Effect } from "effect"
import { InvalidInput, NotFound } from "../domain/errors.ts"
import type { SqlClient } from "../store/Sql.ts"
import { type Interval, type Period, periodRange } from "./buckets.ts"
import type { EnergyKind, Flow, Source } from "./readings.ts"
import { Zone } from "./zone.ts"

export type Scope =
  | { readonly type: "organisation" }
  | { readonly type: "space"; readonly id: string }
  | { readonly type: "device"; readonly id: string }

export type Breakdown = "device" | "country"

/** A request as the route validated it (each field already checked on its own). */
export interface EnergyRequest {
  readonly kind: EnergyKind
  readonly spaceId?: string | undefined
  readonly deviceId?: string | undefined
  readonly since?: number | undefined
  readonly until?: number | undefined
  readonly interval?: Interval | undefined
  readonly timezone?: string | undefined
  readonly current?: Period | undefined
  readonly previous?: Period | undefined
  readonly breakdown?: Breakdown | undefined
  readonly source?: Source | undefined
  readonly flow?: Flow | undefined
  readonly limit: number
  readonly continuationToken?: string | undefined
  /** false: answer from raw readings only (diagnostics and the benchmark's reference). */
  readonly rollups: boolean
}

/** A query with every default applied: what a continuation token carries. */
export interface Resolved {
  readonly kind: EnergyKind
  readonly scope: Scope
  readonly since: number | undefined
  readonly until: number
  readonly interval: Interval
  readonly timezone: string
  readonly breakdown: Breakdown | undefined
  readonly source: Source | undefined
  readonly flow: Flow
  readonly limit: number
  readonly rollups: boolean
  /** Where this page starts: a bucket start (later pages) or `since`. */
  readonly from: number | undefined
}

/** Buckets per page unless `limit` asks for fewer. */
export const MAX_PAGE_BUCKETS = 1_000
/** Instants a query may name: 1970 up to the end of year 9999. */
const MAX_INSTANT = 253_402_300_800_000

export const invalid = (field: string, rule: string) => new InvalidInput({ field, message: `${field}: ${rule}` })

export const isInstant = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0 && v <= MAX_INSTANT

// ---------------------------------------------------------------------------------------
// Resolving a request

/** The scope's own time zone: its space's, else UTC. Another organisation's id is not found. */
export const scopeOf = Effect.fnUntraced(function*(sql: SqlClient, organisationId: string, scope: Scope) {
  if (scope.type === "organisation") return "UTC"
  if (scope.type === "space") {
    const [space] = yield* sql.query<{ timezone: string }>(
      "SELECT timezone FROM spaces WHERE id = $1 AND organisation_id = $2",
      [scope.id, organisationId]
    )
    if (space === undefined) return yield* new NotFound({ resource: "space", id: scope.id })
    return space.timezone
  }
  const [device] = yield* sql.query<{ timezone: string | null }>(
    "SELECT s.timezone FROM devices d LEFT JOIN spaces s ON s.id = d.space_id WHERE d.id = $1 AND d.organisation_id = $2",
    [scope.id, organisationId]
  )
  if (device === undefined) return yield* new NotFound({ resource: "device", id: scope.id })
  return device.timezone ?? "UTC"
})

export const requestedScope = (request: EnergyRequest): Scope =>
  request.deviceId !== undefined
    ? { type: "device", id: request.deviceId }
    : request.spaceId !== undefined
    ? { type: "space", id: request.spaceId }
    : { type: "organisation" }

export const resolve = (request: EnergyRequest, scope: Scope, scopeZone: string, now: number): Resolved | InvalidInput => {
  const timezone = request.timezone ?? (Zone.of(scopeZone) === undefined ? "UTC" : scopeZone)
  const zone = Zone.of(timezone)
  if (zone === undefined) return invalid("timezone", `must be an IANA time zone name such as Europe/Dublin; got ${JSON.stringify(timezone)}`)
  for (const [field, value] of [["since", request.since], ["until", request.until]] as const) {
    if (value !== undefined && !isInstant(value)) return invalid(field, "must lie between 1970 and the end of year 9999")
  }
  let since = request.since
  let until = request.until ?? now
  const period = request.current ?? request.previous
  if (period !== undefined) {
    const which = request.current !== undefined ? "current" : "previous"
    if (request.since !== undefined || request.until !== undefined) {
      return invalid(which, "cannot be combined with since or until")
    }
    const range = periodRange(period, which, zone, now)
    since = range.since
    until = range.until
  }
  if (since !== undefined && since > until) return invalid("since", "must not be after until")
  return {
    kind: request.kind,
    scope,
    since,
    until,
    interval: request.interval ?? { n: 1, unit: "hour" },
    timezone,
    breakdown: request.breakdown,
    source: request.source,
    flow: request.flow ?? "consumption",
    limit: request.limit,
    rollups: request.rollups,
    from: undefined
  }
}
