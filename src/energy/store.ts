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

/**
 * The device, space and organisation series of each (device, kind, source, flow), in the
 * device's space as it is now; created when new. Looked up first, so the identity sequence
 * is not spent on conflicts.
 */
const resolveSeries = (tx: SqlClient, keys: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const columns = [0, 1, 2, 3].map((i) => keys.map((k) => splitKey(k)[i]))
    let found = yield* tx.query<FoundSeries>(FIND_SERIES, columns)
    const missing = found.filter((f) => f.device_series === null || f.space_series === null || f.organisation_series === null)
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
    return ids
  })

/**
 * Raw readings and the rollup rows they add to, in one statement. The rollup rows come
 * summed and sorted by (series, bucket) from `Rollup`: the database only inserts or adds,
 * and takes row locks in one order in every transaction (no deadlocks between writers).
 */
const INSERT_READINGS = `WITH raw AS (
    INSERT INTO energy_readings (timestamp, series_id, quantity, event_id)
    SELECT * FROM unnest($1::int8[], $2::int4[], $3::numeric[], $4::text[])
  ), hourly AS (
    INSERT INTO energy_hourly (series_id, bucket, quantity)
    SELECT * FROM unnest($5::int4[], $6::int8[], $7::numeric[])
    ON CONFLICT (series_id, bucket) DO UPDATE SET quantity = energy_hourly.quantity + EXCLUDED.quantity
  )
  INSERT INTO energy_daily (series_id, bucket, quantity)
  SELECT * FROM unnest($8::int4[], $9::int8[], $10::numeric[])
  ON CONFLICT (series_id, bucket) DO UPDATE SET quantity = energy_daily.quantity + EXCLUDED.quantity`

const HOUR = 3_600_000
const DAY = 86_400_000

/**
 * Sums per (series, bucket), exact: the work of a GROUP BY done in the server process, which
 * has cores to spare while the database is the bottleneck of a bulk import.
 */
class Rollup {
  private readonly sums = new Map<number, Map<number, Decimal>>()

  add(series: number, bucket: number, quantity: Decimal): void {
    let buckets = this.sums.get(series)
    if (buckets === undefined) this.sums.set(series, buckets = new Map())
    const sum = buckets.get(bucket)
    buckets.set(bucket, sum === undefined ? quantity : addDecimal(sum, quantity))
  }

  /** Columns sorted by series, then bucket. */
  columns(): [Array<number>, Array<number>, Array<string>] {
    const series: Array<number> = []
    const buckets: Array<number> = []
    const quantities: Array<string> = []
    for (const id of [...this.sums.keys()].sort((a, b) => a - b)) {
      const byBucket = this.sums.get(id)!
      for (const bucket of [...byBucket.keys()].sort((a, b) => a - b)) {
        series.push(id)
        buckets.push(bucket)
        quantities.push(formatDecimal(byBucket.get(bucket)!))
      }
    }
    return [series, buckets, quantities]
  }
}

/**
 * Stores readings and adds them to the rollups of their device, space and organisation
 * series, inside `tx` (a group-commit batch or a bulk import): readings, rollups and meter
 * baselines commit together or not at all. Rollup rows are upserted in key order, so
 * concurrent transactions touching the same hours wait for each other instead of deadlocking.
 */
export const writeReadings = (
  tx: SqlClient,
  writes: ReadonlyArray<ReadingWrite>,
  order: MeterOrder
): Effect.Effect<WriteOutcome, SqlError> =>
  Effect.gen(function*() {
    let amounts: Array<Amount> = []
    let baselines = 0
    const meters = writes.filter((w) => w.reading.mode === "meter")
    if (meters.length === 0) {
      amounts = writes.map((write) => ({ write, quantity: write.reading.amount }))
    } else {
      for (const write of writes) if (write.reading.mode === "value") amounts.push({ write, quantity: write.reading.amount })
      const fromMeters = yield* meterAmounts(tx, meters, order)
      amounts.push(...fromMeters.amounts)
      baselines = fromMeters.baselines
    }
    const n = amounts.length
    if (n === 0) return { stored: 0, baselines }
    const rowKeys = new Array<string>(n)
    for (let i = 0; i < n; i++) rowKeys[i] = meterKey(amounts[i].write)
    const keys = [...new Set(rowKeys)]
    const ids = yield* resolveSeries(tx, keys)
    const seriesIds = new Array<number>(n)
    const timestamps = new Array<number>(n)
    const quantities = new Array<string>(n)
    const events = new Array<string | null>(n)
    const hourly = new Rollup()
    const daily = new Rollup()
    for (let i = 0; i < n; i++) {
      const { write, quantity } = amounts[i]
      const series = ids.get(rowKeys[i])!
      const ts = write.timestamp
      const amount = parseNumericText(quantity)
      const hour = ts - (ts % HOUR)
      const day = ts - (ts % DAY)
      seriesIds[i] = series.device
      timestamps[i] = ts
      quantities[i] = quantity
      events[i] = write.eventId
      hourly.add(series.space, hour, amount)
      hourly.add(series.organisation, hour, amount)
      daily.add(series.device, day, amount)
      daily.add(series.space, day, amount)
      daily.add(series.organisation, day, amount)
    }
    yield* tx.query(INSERT_READINGS, [timestamps, seriesIds, quantities, events, ...hourly.columns(), ...daily.columns()])
    return { stored: n, baselines }
  })
