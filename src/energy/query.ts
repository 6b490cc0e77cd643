/**
 * Aggregated energy series: what `GET /energy/{electricity|gas|water}` answers. The
 * request is resolved in request.ts and continued through token.ts; this module finds the
 * series, sums their stored levels per bucket and builds the page.
 */
import { Effect } from "effect"
import { InvalidInput, type NotFound } from "../domain/errors.ts"
import type { SqlClient, SqlError } from "../store/Sql.ts"
import { bucketsOf, gridOf } from "./buckets.ts"
import { addDecimal, type Decimal, formatDecimal, parseNumericText, ZERO } from "./decimal.ts"
import { type Level, NO_ROLLUPS, planRuns } from "./plan.ts"
import type { EnergyKind } from "./readings.ts"
import { type EnergyRequest, invalid, requestedScope, type Resolved, resolve, scopeOf } from "./request.ts"
import { decodeToken, encodeToken } from "./token.ts"
import { Zone } from "./zone.ts"

export interface Reading {
  readonly timestamp: number
  readonly energy?: string
  readonly gas?: string
  readonly water?: string
}

export interface EnergyPage {
  result: Array<Reading>
  continuationToken: string | null
  devices?: Record<string, Array<Reading>>
  countries?: Record<string, Array<Reading>>
}

/** A breakdown page holds at most this many readings over all its devices or countries. */
export const MAX_PAGE_POINTS = 50_000
/** A space or breakdown without a country. */
export const UNKNOWN_COUNTRY = "unknown"

const readingOf = (kind: EnergyKind, timestamp: number, quantity: string): Reading => {
  switch (kind) {
    case "electricity":
      return { energy: quantity, timestamp }
    case "gas":
      // The declared schema names `energy`, the samples `gas`: both carry the quantity.
      return { gas: quantity, energy: quantity, timestamp }
    case "water":
      return { water: quantity, timestamp }
  }
}

// ---------------------------------------------------------------------------------------
// Series and sums

interface Series {
  readonly id: number
  readonly level: "device" | "space" | "organisation"
  readonly space_id: string
  readonly device_id: string
}

type SeriesLevel = Series["level"]

/**
 * The coarsest series that answer a query: the organisation's or the space's own, unless
 * the scope is one device, a breakdown needs devices or spaces, or raw readings are asked
 * for (they belong to device series).
 */
const levelOf = (q: Resolved): SeriesLevel =>
  !q.rollups || q.scope.type === "device" || q.breakdown === "device"
    ? "device"
    : q.breakdown === "country" || q.scope.type === "space"
    ? "space"
    : "organisation"

/** The series of a level in the query's scope, kind, flow and source. */
const seriesAt = (sql: SqlClient, organisationId: string, q: Resolved, level: SeriesLevel) =>
  sql.query<Series>(
    `SELECT id, level, space_id, device_id FROM energy_series
     WHERE organisation_id = $1 AND kind = $2 AND level = $3 AND flow = $4 AND ($5::text IS NULL OR source = $5)
       AND ($6::text IS NULL OR space_id = $6) AND ($7::text IS NULL OR device_id = $7)
     ORDER BY id`,
    [
      organisationId,
      q.kind,
      level,
      q.flow,
      q.source ?? null,
      q.scope.type === "space" ? q.scope.id : null,
      q.scope.type === "device" ? q.scope.id : null
    ]
  )

/** The first instant with a reading in the scope (one index probe per device series), or undefined. */
const firstReading = (sql: SqlClient, raw: ReadonlyArray<Series>) =>
  raw.length === 0
    ? Effect.succeed(undefined)
    : sql.query<{ first: number | null }>(
      `SELECT min(x.timestamp)::int8 AS first FROM unnest($1::int4[]) AS s(id),
         LATERAL (SELECT timestamp FROM energy_readings WHERE series_id = s.id ORDER BY timestamp LIMIT 1) x`,
      [raw.map((s) => s.id)]
    ).pipe(Effect.map(([row]) => row?.first ?? undefined))

const LEVELS: ReadonlyArray<{ level: Level; table: string; column: string }> = [
  { level: "daily", table: "energy_daily", column: "bucket" },
  { level: "hourly", table: "energy_hourly", column: "bucket" },
  { level: "raw", table: "energy_readings", column: "timestamp" }
]

/**
 * Sums per bucket (and per series when `bySeries`), each level read over its runs only:
 * one index range scan per run and series. `starts` are the page's bucket starts; a row
 * at `at` belongs to bucket `width_bucket(at, starts)` (1-based).
 */
const sums = (
  sql: SqlClient,
  starts: ReadonlyArray<number>,
  runs: Record<Level, Array<[number, number]>>,
  series: { rollup: ReadonlyArray<number>; raw: ReadonlyArray<number> },
  bySeries: boolean
) => {
  const params: Array<unknown> = [starts]
  const parts: Array<string> = []
  for (const { level, table, column } of LEVELS) {
    const ranges = runs[level]
    const ids = level === "raw" ? series.raw : series.rollup
    if (ranges.length === 0 || ids.length === 0) continue
    params.push(ranges.map((r) => r[0]), ranges.map((r) => r[1]), ids)
    const n = params.length
    parts.push(
      `SELECT x.series_id, x.${column} AS at, x.quantity
       FROM unnest($${n - 2}::int8[], $${n - 1}::int8[]) AS r(lo, hi)
       JOIN ${table} x ON x.series_id = ANY($${n}::int4[]) AND x.${column} >= r.lo AND x.${column} < r.hi`
    )
  }
  if (parts.length === 0) return Effect.succeed([] as Array<{ series_id: number | null; i: number; q: string }>)
  return sql.query<{ series_id: number | null; i: number; q: string }>(
    `SELECT ${bySeries ? "u.series_id" : "NULL::int4 AS series_id"}, width_bucket(u.at, $1::int8[])::int4 AS i, sum(u.quantity)::text AS q
     FROM (${parts.join("\n UNION ALL ")}) u
     GROUP BY 1, 2`,
    params
  )
}

/**
 * One page of an energy series. Every bucket of the range appears, `"0"` where no reading
 * fell (README "Energy"); the page after it starts at the next bucket, so pages never
 * repeat or skip one.
 */
export const energyPage = Effect.fnUntraced(function*(
  sql: SqlClient,
  organisationId: string,
  request: EnergyRequest,
  now: number
): Effect.fn.Return<EnergyPage, InvalidInput | NotFound | SqlError> {
  let q: Resolved
  if (request.continuationToken !== undefined) {
    const decoded = decodeToken(request.continuationToken, request.kind)
    if (decoded instanceof InvalidInput) return yield* decoded
    q = decoded
    yield* scopeOf(sql, organisationId, q.scope)
  } else {
    if (request.spaceId !== undefined && request.deviceId !== undefined) {
      return yield* invalid("device.id", "give space.id or device.id, not both")
    }
    if (request.current !== undefined && request.previous !== undefined) {
      return yield* invalid("previous", "cannot be combined with current")
    }
    const scope = requestedScope(request)
    const resolved = resolve(request, scope, yield* scopeOf(sql, organisationId, scope), now)
    if (resolved instanceof InvalidInput) return yield* resolved
    q = resolved
  }
  const zone = Zone.of(q.timezone)!
  const level = levelOf(q)
  const series = yield* seriesAt(sql, organisationId, q, level)
  // Device series, read where raw readings are needed; fetched at most once.
  let deviceSeries: ReadonlyArray<Series> | undefined = level === "device" ? series : undefined
  const rawSeries = Effect.suspend(() =>
    deviceSeries !== undefined
      ? Effect.succeed(deviceSeries)
      : seriesAt(sql, organisationId, q, "device").pipe(Effect.tap((found) => Effect.sync(() => (deviceSeries = found))))
  )

  let from = q.from ?? q.since
  if (from === undefined) {
    from = yield* firstReading(sql, yield* rawSeries)
    if (from === undefined || from >= q.until) return emptyPage(q)
    q = { ...q, since: from }
  }

  const keyOf = yield* breakdownKeys(sql, q, series)
  const keys = keyOf === undefined ? [] : [...new Set(keyOf.values())].sort()
  const limit = keyOf === undefined ? q.limit : Math.max(1, Math.min(q.limit, Math.floor(MAX_PAGE_POINTS / Math.max(1, keys.length))))
  const grid = gridOf(q.interval, zone)
  const { buckets, more } = bucketsOf(grid, from, q.until, limit)
  const runs = planRuns(buckets, !q.rollups ? NO_ROLLUPS : { hourly: level !== "device", daily: true })
  const raw = runs.raw.length === 0 ? [] : yield* rawSeries
  if (keyOf !== undefined && raw !== series) {
    for (const [id, key] of (yield* breakdownKeys(sql, q, raw)) ?? []) keyOf.set(id, key)
  }
  const rows = yield* sums(
    sql,
    buckets.map((b) => b.start),
    runs,
    { rollup: series.map((s) => s.id), raw: raw.map((s) => s.id) },
    keyOf !== undefined
  )

  const total = new Array<Decimal>(buckets.length).fill(ZERO)
  const byKey = new Map<string, Array<Decimal>>(keys.map((k) => [k, new Array<Decimal>(buckets.length).fill(ZERO)]))
  for (const row of rows) {
    const i = row.i - 1
    if (i < 0 || i >= buckets.length) continue
    const quantity = parseNumericText(row.q)
    total[i] = addDecimal(total[i], quantity)
    const key = row.series_id === null ? undefined : keyOf?.get(row.series_id)
    if (key !== undefined) {
      let list = byKey.get(key)
      if (list === undefined) byKey.set(key, list = new Array<Decimal>(buckets.length).fill(ZERO))
      list[i] = addDecimal(list[i], quantity)
    }
  }
  const toReadings = (values: ReadonlyArray<Decimal>) => values.map((v, i) => readingOf(q.kind, buckets[i].start, formatDecimal(v)))
  const page: EnergyPage = {
    result: toReadings(total),
    continuationToken: more ? encodeToken(q, grid.next(buckets[buckets.length - 1].start)) : null
  }
  if (q.breakdown !== undefined) {
    const grouped: Record<string, Array<Reading>> = {}
    for (const [key, values] of byKey) grouped[key] = toReadings(values)
    if (q.breakdown === "device") page.devices = grouped
    else page.countries = grouped
  }
  return page
})

const emptyPage = (q: Resolved): EnergyPage => {
  const page: EnergyPage = { result: [], continuationToken: null }
  if (q.breakdown === "device") page.devices = {}
  if (q.breakdown === "country") page.countries = {}
  return page
}

/** Series id → device id or country (ISO 3166 alpha-3 of the series' space), for a breakdown. */
const breakdownKeys = Effect.fnUntraced(function*(sql: SqlClient, q: Resolved, series: ReadonlyArray<Series>) {
  if (q.breakdown === undefined) return undefined
  if (q.breakdown === "device") return new Map(series.map((s) => [s.id, s.device_id]))
  const spaceIds = [...new Set(series.map((s) => s.space_id).filter((id) => id !== ""))]
  const countries = new Map<string, string>()
  if (spaceIds.length > 0) {
    const rows = yield* sql.query<{ id: string; country: string | null }>(
      "SELECT id, country FROM spaces WHERE id = ANY($1::text[])",
      [spaceIds]
    )
    for (const row of rows) if (row.country !== null) countries.set(row.id, row.country)
  }
  return new Map(series.map((s) => [s.id, countries.get(s.space_id) ?? UNKNOWN_COUNTRY]))
})
