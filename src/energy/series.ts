/**
 * Energy series ids: the device, space and organisation series a meter's readings count
 * towards, looked up (and created when new) in a write transaction, and the cache that
 * spares bulk imports the lookup.
 */
import { Effect } from "effect"
import { SqlError, type SqlClient } from "../store/Sql.ts"

/** A meter key (device, kind, source and flow, NUL-separated) → its four parts. */
export const splitKey = (key: string) => key.split("\u0000")

interface SeriesIds {
  readonly device: number
  readonly space: number
  readonly organisation: number
}

/** Each lookup names every column of the unique key: an index probe whatever the statistics say. */
const seriesLookup = (level: string, space: string, device: string, row: string) =>
  `(SELECT id FROM energy_series s WHERE s.organisation_id = ${row}.organisation_id AND s.kind = ${row}.kind AND s.level = '${level}'
      AND s.space_id = ${space} AND s.device_id = ${device} AND s.source = ${row}.source AND s.flow = ${row}.flow)`

const FIND_SERIES = `WITH k AS MATERIALIZED (
    SELECT k.i, k.device_id, k.kind, k.source, k.flow, dv.organisation_id, COALESCE(dv.space_id, '') AS space_id
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS k(device_id, kind, source, flow, i)
    JOIN devices dv ON dv.id = k.device_id
  ), g AS MATERIALIZED (
    SELECT g.*, ${seriesLookup("space", "g.space_id", "''", "g")} AS space_series,
      ${seriesLookup("organisation", "''", "''", "g")} AS organisation_series
    FROM (SELECT DISTINCT organisation_id, space_id, kind, source, flow FROM k) g
  )
  SELECT k.i::int4 AS i, k.organisation_id, k.space_id, ${seriesLookup("device", "k.space_id", "k.device_id", "k")} AS device_series,
    g.space_series, g.organisation_series
  FROM k JOIN g ON g.organisation_id = k.organisation_id AND g.space_id = k.space_id AND g.kind = k.kind
    AND g.source = k.source AND g.flow = k.flow`

interface FoundSeries {
  i: number
  organisation_id: string
  space_id: string
  device_series: number | null
  space_series: number | null
  organisation_series: number | null
}

interface ResolvedSeries {
  readonly ids: Map<string, SeriesIds>
  /** Keys whose series all existed before this transaction, with the cache key they are valid under. */
  readonly existing: Array<[key: string, cacheKey: string]>
}

/** A series key in the cache: the organisation and space the device sat in, and its meter key. */
const cacheKeyOf = (organisationId: string, spaceId: string, key: string) => `${organisationId}\u0000${spaceId}\u0000${key}`

/**
 * The device, space and organisation series of each (device, kind, source, flow), in the
 * device's space as it is now; created when new. Looked up first, so the identity sequence
 * is not spent on conflicts.
 */
const resolveSeries = Effect.fnUntraced(function*(tx: SqlClient, keys: ReadonlyArray<string>) {
  const columns = [0, 1, 2, 3].map((i) => keys.map((k) => splitKey(k)[i]))
  let found = yield* tx.query<FoundSeries>(FIND_SERIES, columns)
  const existing: Array<[string, string]> = []
  const missing: Array<FoundSeries> = []
  for (const f of found) {
    if (f.device_series === null || f.space_series === null || f.organisation_series === null) missing.push(f)
    else existing.push([keys[f.i - 1], cacheKeyOf(f.organisation_id, f.space_id, keys[f.i - 1])])
  }
  if (missing.length > 0) {
    const tuples = new Set<string>()
    for (const f of missing) {
      const [deviceId, kind, source, flow] = splitKey(keys[f.i - 1])
      tuples.add([f.organisation_id, kind, "device", f.space_id, deviceId, source, flow].join("\u0000"))
      tuples.add([f.organisation_id, kind, "space", f.space_id, "", source, flow].join("\u0000"))
      tuples.add([f.organisation_id, kind, "organisation", "", "", source, flow].join("\u0000"))
    }
    const sorted = [...tuples].sort().map(splitKey)
    yield* tx.query(
      `INSERT INTO energy_series (organisation_id, kind, level, space_id, device_id, source, flow)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) ORDER BY 1, 2, 3, 4, 5, 6, 7
       ON CONFLICT DO NOTHING`,
      [0, 1, 2, 3, 4, 5, 6].map((i) => sorted.map((t) => t[i]))
    )
    found = yield* tx.query<FoundSeries>(FIND_SERIES, columns)
  }
  const ids = new Map<string, SeriesIds>()
  for (const f of found) {
    if (f.device_series === null || f.space_series === null || f.organisation_series === null) continue
    ids.set(keys[f.i - 1], { device: f.device_series, space: f.space_series, organisation: f.organisation_series })
  }
  const lost = keys.find((k) => !ids.has(k))
  if (lost !== undefined) {
    return yield* new SqlError({ message: `energy series of device ${splitKey(lost)[0]} could not be resolved (deleted or moved meanwhile)`, cause: lost })
  }
  return { ids, existing } satisfies ResolvedSeries
})

/**
 * Series ids by (organisation, space, device, kind, source, flow), for bulk imports: a
 * series row is never updated and only goes with its organisation, so an id once seen
 * committed stays right, and an import need not look its series up again. Only ids that
 * existed before the transaction are kept (one created by a transaction that then rolls
 * back never enters). Per database client: tests run several databases in one process.
 */
export class SeriesCache {
  private readonly ids = new Map<string, SeriesIds>()

  constructor(private readonly capacity = 200_000) {}

  get(cacheKey: string): SeriesIds | undefined {
    return this.ids.get(cacheKey)
  }

  set(cacheKey: string, ids: SeriesIds): void {
    if (this.ids.size >= this.capacity) this.ids.clear()
    this.ids.set(cacheKey, ids)
  }
}

/** Where the devices of a bulk import sit, read in its transaction, and the cache of their series. */
export interface Placement {
  readonly organisationId: string
  /** Device id → its space id ('' without one). */
  readonly spaces: ReadonlyMap<string, string>
  readonly cache: SeriesCache
}

/** The series of `keys`: from the cache where the device's space gives a hit, the rest from the database. */
export const seriesOf = Effect.fnUntraced(function*(tx: SqlClient, keys: ReadonlyArray<string>, placement: Placement | undefined) {
  if (placement === undefined) return (yield* resolveSeries(tx, keys)).ids
  const ids = new Map<string, SeriesIds>()
  const missing: Array<string> = []
  for (const key of keys) {
    const spaceId = placement.spaces.get(key.slice(0, key.indexOf("\u0000")))
    const hit = spaceId === undefined ? undefined : placement.cache.get(cacheKeyOf(placement.organisationId, spaceId, key))
    if (hit === undefined) missing.push(key)
    else ids.set(key, hit)
  }
  if (missing.length === 0) return ids
  const resolved = yield* resolveSeries(tx, missing)
  for (const [key, series] of resolved.ids) ids.set(key, series)
  for (const [key, cacheKey] of resolved.existing) placement.cache.set(cacheKey, resolved.ids.get(key)!)
  return ids
})
