import { Effect } from "effect"
import { SqlError, type SqlClient } from "../store/Sql.ts"
import { addDecimal, type Decimal, formatDecimal, parseDecimal, parseNumericText } from "./decimal.ts"
import { meterDelta } from "./meter.ts"
import type { EnergyKind, ReadingInput } from "./readings.ts"

/** One reading to store, from an event (with its id) or a bulk-import row. */
export interface ReadingWrite {
  readonly deviceId: string
  readonly timestamp: number
  readonly reading: ReadingInput
  readonly eventId: string | null
}

export interface WriteOutcome {
  /** Readings stored (meter values that only set a baseline are not). */
  readonly stored: number
  /** Meter values that set a first baseline. */
  readonly baselines: number
}

/**
 * Order in which register values of one meter follow each other: ingestion takes them as
 * they arrived (what the device sent last is the newest); a history import by timestamp.
 */
export type MeterOrder = "arrival" | "timestamp"

/** A quantity to store: the reading it comes from and the consumption it counts. */
interface Amount {
  readonly write: ReadingWrite
  /** Plain decimal text. */
  readonly quantity: string
}

/** device, kind, source and flow: a meter, and the device series of its readings. */
const meterKey = (w: ReadingWrite) => `${w.deviceId}\u0000${w.reading.kind}\u0000${w.reading.source}\u0000${w.reading.flow}`
const splitKey = (key: string) => key.split("\u0000")

const LOCK_METERS = `SELECT m.device_id, m.kind, m.source, m.flow, m.register::text AS register
  FROM energy_meters m
  JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(device_id, kind, source, flow)
    ON m.device_id = k.device_id AND m.kind = k.kind AND m.source = k.source AND m.flow = k.flow
  ORDER BY m.device_id, m.kind, m.source, m.flow
  FOR UPDATE OF m`

/**
 * Register readings → consumption: locks the baselines of the meters in `writes` (in key
 * order, so concurrent writers never deadlock), applies `meterDelta` in order, and stores the
 * new baselines — all inside the caller's transaction.
 */
const meterAmounts = (tx: SqlClient, writes: ReadonlyArray<ReadingWrite>, order: MeterOrder) =>
  Effect.gen(function*() {
    const keys = [...new Set(writes.map(meterKey))].sort()
    const columns = [0, 1, 2, 3].map((i) => keys.map((k) => splitKey(k)[i]))
    yield* tx.query(
      `INSERT INTO energy_meters (device_id, kind, source, flow)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) ORDER BY 1, 2, 3, 4
       ON CONFLICT DO NOTHING`,
      columns
    )
    const locked = yield* tx.query<{ device_id: string; kind: string; source: string; flow: string; register: string | null }>(LOCK_METERS, columns)
    const registers = new Map<string, Decimal | undefined>()
    for (const row of locked) {
      registers.set([row.device_id, row.kind, row.source, row.flow].join("\u0000"), row.register === null ? undefined : parseNumericText(row.register))
    }
    const sequence = order === "timestamp"
      ? [...writes].sort((a, b) => a.timestamp - b.timestamp)
      : writes
    const amounts: Array<Amount> = []
    const last = new Map<string, number>()
    let baselines = 0
    for (const w of sequence) {
      const key = meterKey(w)
      const register = parseDecimal(w.reading.amount)!
      const delta = meterDelta(registers.get(key), register)
      registers.set(key, register)
      last.set(key, w.timestamp)
      if (delta === undefined) {
        baselines++
        continue
      }
      amounts.push({ write: w, quantity: formatDecimal(delta) })
    }
    yield* tx.query(
      `UPDATE energy_meters m SET register = u.register::numeric, timestamp = u.at
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[]) AS u(device_id, kind, source, flow, register, at)
       WHERE m.device_id = u.device_id AND m.kind = u.kind AND m.source = u.source AND m.flow = u.flow`,
      [...columns, keys.map((k) => formatDecimal(registers.get(k)!)), keys.map((k) => last.get(k)!)]
    )
    return { amounts, baselines }
  })

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
const resolveSeries = (tx: SqlClient, keys: ReadonlyArray<string>) =>
  Effect.gen(function*() {
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
const seriesOf = (tx: SqlClient, keys: ReadonlyArray<string>, placement: Placement | undefined) =>
  Effect.gen(function*() {
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

/**
 * Raw readings, in their own statement ahead of the rollups: it holds no row lock another
 * writer waits for, so concurrent imports insert their readings side by side and queue only
 * for the short rollup statement at the end of their transactions. Arrays travel as array
 * literals in one text parameter each (the driver's per-element array serialisation costs
 * more than the insert in the server process; the values are digits and points only).
 */
const INSERT_READINGS = `INSERT INTO energy_readings (timestamp, series_id, quantity)
  SELECT * FROM unnest($1::text::int8[], $2::text::int4[], $3::text::numeric[])`

const INSERT_EVENT_READINGS = `INSERT INTO energy_readings (timestamp, series_id, quantity, event_id)
  SELECT * FROM unnest($1::text::int8[], $2::text::int4[], $3::text::numeric[], $4::text::text[])`

/**
 * The rollup rows, summed and sorted by (series, bucket) by `Rollup`: the database only
 * inserts or adds, and takes row locks in one order in every transaction (daily rows, then
 * hourly ones, each in key order), so concurrent writers wait for each other, never deadlock.
 */
const UPSERT_ROLLUPS = `WITH hourly AS (
    INSERT INTO energy_hourly (series_id, bucket, quantity)
    SELECT * FROM unnest($1::text::int4[], $2::text::int8[], $3::text::numeric[])
    ON CONFLICT (series_id, bucket) DO UPDATE SET quantity = energy_hourly.quantity + EXCLUDED.quantity
  )
  INSERT INTO energy_daily (series_id, bucket, quantity)
  SELECT * FROM unnest($4::text::int4[], $5::text::int8[], $6::text::numeric[])
  ON CONFLICT (series_id, bucket) DO UPDATE SET quantity = energy_daily.quantity + EXCLUDED.quantity`

/** `{1,2.5,3}`: an array literal of numbers or plain decimals, which need no quoting. */
const plainArray = (values: ReadonlyArray<number | string>): string => `{${values.join(",")}}`

/** A text array literal, every element quoted; null → NULL. */
const textArray = (values: ReadonlyArray<string | null>): string =>
  `{${values.map((v) => (v === null ? "NULL" : `"${v.replace(/[\\"]/g, "\\$&")}"`)).join(",")}}`

const HOUR = 3_600_000
const DAY = 86_400_000

/** Largest micro-unit sum kept in a double before it moves into the exact total (2^52). */
const FAST_LIMIT = 4_503_599_627_370_496
const POW10 = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000]

/**
 * A plain decimal of at most 9 integer digits and 6 places → its millionths, an integer a
 * double holds exactly; -1 for anything else (more places, larger), which takes the exact path.
 */
const microUnits = (text: string): number => {
  const n = text.length
  let whole = 0
  let i = 0
  for (; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === 46) break
    if (c < 48 || c > 57 || i >= 9) return -1
    whole = whole * 10 + (c - 48)
  }
  if (i === 0) return -1
  if (i === n) return whole * 1_000_000
  let fraction = 0
  const places = n - i - 1
  if (places < 1 || places > 6) return -1
  for (i++; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c < 48 || c > 57) return -1
    fraction = fraction * 10 + (c - 48)
  }
  return whole * 1_000_000 + fraction * POW10[6 - places]
}

/** One rollup sum: millionths in a double while they fit, the rest exact. */
class Sum {
  micro = 0
  exact: Decimal | undefined = undefined

  /** `micro` from `microUnits`, or -1 with the quantity's text. */
  add(micro: number, quantity: string): void {
    if (micro < 0) this.addExact(parseNumericText(quantity))
    else {
      this.micro += micro
      if (this.micro >= FAST_LIMIT) {
        this.addExact({ units: BigInt(this.micro), scale: 6 })
        this.micro = 0
      }
    }
  }

  addSum(other: Sum): void {
    if (other.exact !== undefined) this.addExact(other.exact)
    this.add(other.micro, "")
  }

  private addExact(amount: Decimal): void {
    this.exact = this.exact === undefined ? amount : addDecimal(this.exact, amount)
  }

  text(): string {
    const micro: Decimal = { units: BigInt(this.micro), scale: 6 }
    return formatDecimal(this.exact === undefined ? micro : addDecimal(this.exact, micro))
  }
}

/**
 * Sums per (series, bucket), exact: the work of a GROUP BY done in the server process, so
 * the database receives one row per rollup row. Quantities of up to 6 places (any meter
 * prints) are summed as integer millionths in doubles, others as scaled big integers.
 */
class Rollup {
  private readonly sums = new Map<number, Map<number, Sum>>()

  sum(series: number, bucket: number): Sum {
    let buckets = this.sums.get(series)
    if (buckets === undefined) this.sums.set(series, buckets = new Map())
    let sum = buckets.get(bucket)
    if (sum === undefined) buckets.set(bucket, sum = new Sum())
    return sum
  }

  entries(): Iterable<[number, Map<number, Sum>]> {
    return this.sums
  }

  /** Array literals of series, bucket and quantity, sorted by series, then bucket. */
  columns(): [string, string, string] {
    const series: Array<number> = []
    const buckets: Array<number> = []
    const quantities: Array<string> = []
    for (const id of [...this.sums.keys()].sort((a, b) => a - b)) {
      const byBucket = this.sums.get(id)!
      for (const bucket of [...byBucket.keys()].sort((a, b) => a - b)) {
        series.push(id)
        buckets.push(bucket)
        quantities.push(byBucket.get(bucket)!.text())
      }
    }
    return [plainArray(series), plainArray(buckets), plainArray(quantities)]
  }
}

/**
 * Row indices ordered by (series, timestamp), stable: readings enter the `(series_id,
 * timestamp)` index one leaf page after another instead of one series per row, which roughly
 * halves the database's work for time-major batches (every device, a few hours).
 * `group[i]` is row i's series as an index into `seriesOfGroup`.
 */
const insertionOrder = (group: Int32Array, seriesOfGroup: ReadonlyArray<number>, timestamps: ReadonlyArray<number>): Array<number> => {
  const groups = seriesOfGroup.length
  const ranked = Array.from({ length: groups }, (_, g) => g).sort((a, b) => seriesOfGroup[a] - seriesOfGroup[b])
  const counts = new Int32Array(groups)
  for (let i = 0; i < group.length; i++) counts[group[i]]++
  // Where each group starts, in series order.
  const offset = new Int32Array(groups)
  let at = 0
  for (const g of ranked) {
    offset[g] = at
    at += counts[g]
  }
  const out = new Array<number>(group.length)
  const next = Int32Array.from(offset)
  for (let i = 0; i < group.length; i++) out[next[group[i]]++] = i
  for (const g of ranked) {
    const from = offset[g]
    const to = next[g]
    for (let k = from + 1; k < to; k++) {
      if (timestamps[out[k]] < timestamps[out[k - 1]]) {
        const sorted = out.slice(from, to).sort((a, b) => timestamps[a] - timestamps[b] || a - b)
        for (let j = 0; j < sorted.length; j++) out[from + j] = sorted[j]
        break
      }
    }
  }
  return out
}

/** Row → index of its meter key in `keys` (device, kind, source, flow), without building a string per row. */
const groupRows = (writes: ReadonlyArray<ReadingWrite>) => {
  const n = writes.length
  const group = new Int32Array(n)
  const keys: Array<string> = []
  const byDevice = new Map<string, Map<string, number>>()
  let lastReading: ReadingInput | undefined
  let lastSuffix = ""
  for (let i = 0; i < n; i++) {
    const w = writes[i]
    const r = w.reading
    if (lastReading === undefined || r.kind !== lastReading.kind || r.source !== lastReading.source || r.flow !== lastReading.flow) {
      lastSuffix = `${r.kind}\u0000${r.source}\u0000${r.flow}`
      lastReading = r
    }
    let bySuffix = byDevice.get(w.deviceId)
    if (bySuffix === undefined) byDevice.set(w.deviceId, bySuffix = new Map())
    let index = bySuffix.get(lastSuffix)
    if (index === undefined) {
      index = keys.length
      keys.push(`${w.deviceId}\u0000${lastSuffix}`)
      bySuffix.set(lastSuffix, index)
    }
    group[i] = index
  }
  return { group, keys }
}

/**
 * Stores readings and adds them to the rollups of their device, space and organisation
 * series, inside `tx` (a group-commit batch or a bulk import): readings, rollups and meter
 * baselines commit together or not at all. Rollup rows are upserted in key order, so
 * concurrent transactions touching the same hours wait for each other instead of deadlocking.
 * `placement` (bulk imports) lets series ids come from its cache; it must be the only
 * `writeReadings` of its transaction.
 */
export const writeReadings = (
  tx: SqlClient,
  writes: ReadonlyArray<ReadingWrite>,
  order: MeterOrder,
  placement?: Placement
): Effect.Effect<WriteOutcome, SqlError> =>
  Effect.gen(function*() {
    let stored: ReadonlyArray<ReadingWrite> = writes
    let quantities: Array<string>
    let baselines = 0
    const meters = writes.filter((w) => w.reading.mode === "meter")
    if (meters.length === 0) {
      quantities = writes.map((w) => w.reading.amount)
    } else {
      const values = writes.filter((w) => w.reading.mode === "value")
      const fromMeters = yield* meterAmounts(tx, meters, order)
      stored = [...values, ...fromMeters.amounts.map((a) => a.write)]
      quantities = [...values.map((w) => w.reading.amount), ...fromMeters.amounts.map((a) => a.quantity)]
      baselines = fromMeters.baselines
    }
    const n = stored.length
    if (n === 0) return { stored: 0, baselines }
    const { group, keys } = groupRows(stored)
    const ids = yield* seriesOf(tx, keys, placement)
    const seriesOfGroup = keys.map((k) => ids.get(k)!)
    const timestamps = new Array<number>(n)
    // Per row, only the device's day and the space's hour are summed; the space's days and
    // the organisation's hours and days are sums of the space's hours.
    const spaceHours = new Rollup()
    const daily = new Rollup()
    let withEvents = false
    for (let i = 0; i < n; i++) {
      const write = stored[i]
      const quantity = quantities[i]
      const series = seriesOfGroup[group[i]]
      const ts = write.timestamp
      const micro = microUnits(quantity)
      timestamps[i] = ts
      if (write.eventId !== null) withEvents = true
      spaceHours.sum(series.space, ts - (ts % HOUR)).add(micro, quantity)
      daily.sum(series.device, ts - (ts % DAY)).add(micro, quantity)
    }
    const organisationOf = new Map(seriesOfGroup.map((s) => [s.space, s.organisation]))
    const hourly = new Rollup()
    for (const [space, buckets] of spaceHours.entries()) {
      const organisation = organisationOf.get(space)!
      for (const [hour, sum] of buckets) {
        hourly.sum(space, hour).addSum(sum)
        hourly.sum(organisation, hour).addSum(sum)
        daily.sum(space, hour - (hour % DAY)).addSum(sum)
        daily.sum(organisation, hour - (hour % DAY)).addSum(sum)
      }
    }
    const rows = insertionOrder(group, seriesOfGroup.map((s) => s.device), timestamps)
    const columns = [
      plainArray(rows.map((i) => timestamps[i])),
      plainArray(rows.map((i) => seriesOfGroup[group[i]].device)),
      plainArray(rows.map((i) => quantities[i]))
    ]
    if (withEvents) yield* tx.query(INSERT_EVENT_READINGS, [...columns, textArray(rows.map((i) => stored[i].eventId))])
    else yield* tx.query(INSERT_READINGS, columns)
    yield* tx.query(UPSERT_ROLLUPS, [...hourly.columns(), ...daily.columns()])
    return { stored: n, baselines }
  })
