/**
 * The write path of energy readings: `writeReadings` stores a batch's readings and adds
 * them to the hourly and daily rollups, turning meter register values into amounts first.
 */
import { Effect } from "effect"
import type { SqlClient, SqlError } from "../store/Sql.ts"
import { type Decimal, formatDecimal, parseDecimal, parseNumericText } from "./decimal.ts"
import { meterDelta } from "./meter.ts"
import type { ReadingInput } from "./readings.ts"
import { insertionOrder, microUnits, plainArray, Rollup, textArray } from "./rollup.ts"
import { type Placement, seriesOf, splitKey } from "./series.ts"

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
const meterAmounts = Effect.fnUntraced(function*(tx: SqlClient, writes: ReadonlyArray<ReadingWrite>, order: MeterOrder) {
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
 * A bulk import's readings go by COPY (`copyIn`, in a transaction, on both drivers): at
 * 100,000 rows a batch (10,000 series, ten rows each, into the indexed table) Postgres took
 * 266 ms against 329 ms for INSERT … unnest, alone on this machine. Events keep the INSERT on
 * Postgres: their batches are small, and a refused COPY hides the row's own error code there
 * (Sql.ts), which the writer's retry of a failed batch reads; PGlite's large event batches take
 * COPY (src/store/batch.ts).
 */
const COPY_FROM_ROWS = 1_000
const COPY_READINGS = "COPY energy_readings (timestamp, series_id, quantity) FROM STDIN"

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

const HOUR = 3_600_000
const DAY = 86_400_000

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
export const writeReadings = Effect.fnUntraced(function*(
  tx: SqlClient,
  writes: ReadonlyArray<ReadingWrite>,
  order: MeterOrder,
  placement?: Placement
): Effect.fn.Return<WriteOutcome, SqlError> {
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
  if (placement !== undefined && !withEvents && tx.copyIn !== undefined && n >= COPY_FROM_ROWS) {
    let text = ""
    for (const i of rows) text += `${timestamps[i]}\t${seriesOfGroup[group[i]].device}\t${quantities[i]}\n`
    yield* tx.copyIn(COPY_READINGS, text)
  } else {
    const columns = [
      plainArray(rows.map((i) => timestamps[i])),
      plainArray(rows.map((i) => seriesOfGroup[group[i]].device)),
      plainArray(rows.map((i) => quantities[i]))
    ]
    if (withEvents) yield* tx.query(INSERT_EVENT_READINGS, [...columns, textArray(rows.map((i) => stored[i].eventId))])
    else yield* tx.query(INSERT_READINGS, columns)
  }
  yield* tx.query(UPSERT_ROLLUPS, [...hourly.columns(), ...daily.columns()])
  return { stored: n, baselines }
})
