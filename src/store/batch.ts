import { Cause, Duration, Effect, Exit, Schedule } from "effect"
import { retryFailed } from "../domain/retry.ts"
import type { ReadingInput } from "../energy/readings.ts"
import { writeReadings } from "../energy/store.ts"
import { touchDevices } from "./devices.ts"
import { eventsCopyText, eventsDocument, runsDocument, seenDocument } from "./batchText.ts"
import { isConnectionLoss, type SqlClient, type SqlError } from "./Sql.ts"

/** What the group-commit writer (`Writer.ts`) stores, and how one batch of it is written. */

export interface EventFile {
  readonly filename: string | null
  readonly contentType: string
  readonly bytes: Uint8Array
}

export interface EventRow {
  readonly id: string
  readonly organisationId: string
  readonly deviceId: string
  readonly name: string
  /** JSON text of `data` (null: no data). */
  readonly data: string | null
  readonly timestamp: number
  readonly receivedAt: number
  readonly protocol: string
  readonly file?: EventFile | undefined
  /** The energy reading an `electricity`/`gas`/`water` event carries: stored in the event's transaction. */
  readonly reading?: ReadingInput | undefined
}

export interface LocationRow {
  readonly id: string
  readonly organisationId: string
  readonly deviceId: string
  readonly latitude: string
  readonly longitude: string
  readonly altitude: string | null
  readonly timestamp: number
  readonly receivedAt: number
  readonly protocol: string
}

export interface CommandRunRow {
  readonly id: string
  readonly organisationId: string
  readonly commandId: string
  readonly deviceId: string
  readonly data: string | null
  readonly timestamp: number
  readonly protocol: string
}

export type WriteItem =
  | { readonly _tag: "event"; readonly row: EventRow }
  | { readonly _tag: "location"; readonly row: LocationRow }
  | { readonly _tag: "run"; readonly row: CommandRunRow }

const INSERT_EVENTS = `INSERT INTO events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol, has_file)
  SELECT u.id, u.org, u.dev, u.name, u.data::jsonb, u.ts, u.rcv, u.proto, u.has_file::boolean
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[], $8::text[], $9::text[])
    AS u(id, org, dev, name, data, ts, rcv, proto, has_file)`

const INSERT_LOCATIONS = `INSERT INTO locations (id, organisation_id, device_id, latitude, longitude, altitude, timestamp, received_at, protocol)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::numeric[], $5::numeric[], $6::numeric[], $7::int8[], $8::int8[], $9::text[])`

const INSERT_RUNS = `INSERT INTO command_runs (id, organisation_id, command_id, device_id, data, timestamp, protocol)
  SELECT u.id, u.org, u.cmd, u.dev, u.data::jsonb, u.ts, u.proto
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::text[]) AS u(id, org, cmd, dev, data, ts, proto)`

/**
 * `INSERT_RUNS` for PGlite: the runs as one JSON document (`runsDocument`), a text parameter, so
 * that the statement is run prepared (`SqlClient.write`): PGlite's `query` would parse and plan it
 * at every batch, and a batch of command runs is usually a few.
 */
const INSERT_RUNS_DOCUMENT = `INSERT INTO command_runs (id, organisation_id, command_id, device_id, data, timestamp, protocol)
  SELECT u.id, u.org, u.cmd, u.dev, (u.data -> 0)::jsonb, u.ts, u.proto
  FROM json_to_recordset($1::text::json) AS u(id text, org text, cmd text, dev text, data json, ts int8, proto text)`

/**
 * A batch's events from their JSON document (`eventsDocument`, `$1`), the insert every events
 * statement holds (the function `events_written`, migrations/0021, holds it as its first statement).
 *
 * The documents are read as `json`, not `jsonb`: `json_to_recordset` takes each record's fields
 * from the text as it scans it, and only each event's `data` is parsed into `jsonb` (the column's
 * type) by its cast; `$1::text::jsonb` built the whole document as a `jsonb` value first, then
 * took it apart. A Postgres backend's CPU per event, 1,000-event batches over 1,000 devices (a
 * scratch comparison on one server, the variants alternated): 23.3 µs against 40.6; at 10-event
 * batches no difference (133 against 130 µs, the statement's own cost). The same values are
 * stored: a JSON null stays a JSON null, no data stays SQL NULL, and of keys repeated inside
 * `data` the last is kept, as `jsonb` keeps it.
 */
export const INSERT_EVENTS_DOCUMENT = `INSERT INTO events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol, has_file)
    SELECT u.id, u.org, u.dev, u.name, (u.data -> 0)::jsonb, u.ts, u.rcv, u.proto, false
    FROM json_to_recordset($1::text::json) AS u(id text, org text, dev text, name text, data json, ts int8, rcv int8, proto text)`

/** The events insert, and the devices' receipts of a batch (`seenDocument`, `$2`) as `seen`. */
export const INSERT_EVENTS_WITH_SEEN = `WITH inserted AS (${INSERT_EVENTS_DOCUMENT} RETURNING 1),
  seen AS (SELECT * FROM json_to_recordset($2::text::json) AS s(id text, at int8))`

/**
 * The common batch, events without files or readings, as one statement: it commits on its own
 * (one round trip, no BEGIN/COMMIT), inserting the events and marking their devices seen together.
 * Rows go as one JSON document (`eventsDocument`), which costs the server a parse instead of
 * costing this process the escaping of ten text arrays; `$1::text` keeps the driver from
 * serialising the text again as JSON.
 *
 * The function `events_written` (migrations/0021) inserts the events (the same insert as
 * `INSERT_EVENTS_DOCUMENT`), then moves each device's `device_seen.last_seen_at` forward: the
 * insert's device check locks the devices before their `device_seen` rows are, the order a
 * device's deletion takes them in. Its devices are found by a join with the batch's receipts,
 * locked in id order first; a batch of a few devices goes by `INSERT_EVENTS_SEEN_ONE_BY_ONE`.
 * The former `id = ANY(ARRAY(…))` was planned as a scan of the whole table comparing every row
 * with every element of the array: bench:store on Postgres, 100-event batches over 1,000 devices,
 * 71.5 → 44.2 µs of the backend's CPU per event (bench/RESULTS.md, session 40).
 */
export const INSERT_EVENTS_TOUCH = "SELECT events_written($1::text::json, $2::text::json, false)"

/**
 * A batch from at most this many devices marks them seen one by one (`events_written`'s
 * `one_by_one`, migrations/0020 and 0021): each found by its key, none by a scan of the table.
 * bench:store on Postgres over 1,000 devices, backend CPU per event against the join: 10-event
 * batches 75.5 against 89.5 µs, 20-event 54.7 against 60.2, 30-event 52.6 against 54.9, 100-event
 * 47.3 against 44.2 (a probe per device costs more than one scan there; session 40, devices'
 * rows). bench:ingest's latency case at 5,000 events/s wrote batches of 14.5 events on average.
 */
export const DEVICES_ONE_BY_ONE = 24

/** The events insert, and its devices marked seen one by one (`DEVICES_ONE_BY_ONE`); both stores. */
export const INSERT_EVENTS_SEEN_ONE_BY_ONE = "SELECT events_written($1::text::json, $2::text::json, true)"

/** PGlite's devices update from `seen`, a batch's receipts by device (a join). */
const UPDATE_SEEN_ONE_SESSION = `UPDATE device_seen ds SET last_seen_at = GREATEST(COALESCE(ds.last_seen_at, 0), seen.at)
  FROM seen WHERE ds.device_id = seen.id`

/**
 * `INSERT_EVENTS_TOUCH` for PGlite: one session, so no other transaction can hold a device row
 * and no lock order is needed; the locking pass (a row lock, written to the WAL, per device)
 * cost 5-10 µs of the 47-80 per event of a 300-event batch (PGlite alone, alternated rounds).
 */
export const INSERT_EVENTS_TOUCH_ONE_SESSION = `${INSERT_EVENTS_WITH_SEEN}
  ${UPDATE_SEEN_ONE_SESSION}`

/**
 * PGlite's batches from this many plain events on go by COPY: the rows by `COPY … FROM` and the
 * devices by `TOUCH_SEEN_ONE_SESSION`, as one `script` (one request to the store's thread, as
 * `INSERT_EVENTS_TOUCH_ONE_SESSION` is). COPY inserts rows without a JSON document to parse and
 * by pages, not row by row. bench:store, 1,000-event batches over 1,000 devices, PGlite on its
 * thread: see the variant "one statement (no COPY)". Below this they cost the same (150 and 300
 * events: 43.4 against 43.8 and 40.3 against 40.8 µs/event) or COPY costs more (50: 73 against 68).
 */
export const COPY_EVENTS_FROM_ROWS = 500

export const COPY_EVENTS = "COPY events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol) FROM STDIN"

/** The devices part of `INSERT_EVENTS_TOUCH_ONE_SESSION`, alone (`seenDocument`). */
const TOUCH_SEEN_ONE_SESSION = `WITH seen AS (SELECT * FROM json_to_recordset($1::text::json) AS s(id text, at int8))
  ${UPDATE_SEEN_ONE_SESSION}`

/** Each device's latest receipt in a batch (command runs say nothing about the device). */
export const lastSeen = (items: ReadonlyArray<WriteItem>) => {
  const seen = new Map<string, number>()
  for (const item of items) {
    if (item._tag === "run") continue
    const at = seen.get(item.row.deviceId)
    if (at === undefined || at < item.row.receivedAt) seen.set(item.row.deviceId, item.row.receivedAt)
  }
  return seen
}

const plainEvents = (items: ReadonlyArray<WriteItem>): Array<EventRow> | undefined => {
  const events: Array<EventRow> = []
  for (const item of items) {
    if (item._tag !== "event" || item.row.file !== undefined || item.row.reading !== undefined) return undefined
    events.push(item.row)
  }
  return events
}

/** The batch's items when all are command runs, else undefined. */
const onlyRuns = (items: ReadonlyArray<WriteItem>): Array<CommandRunRow> | undefined => {
  const runs: Array<CommandRunRow> = []
  for (const item of items) {
    if (item._tag !== "run") return undefined
    runs.push(item.row)
  }
  return runs
}

/** One array per field, in the order of `keys`: the parameters of an `unnest` insert. */
const columnsOf = <T>(rows: ReadonlyArray<T>, keys: ReadonlyArray<keyof T>) => keys.map((key) => rows.map((row) => row[key]))

const EVENT_COLUMNS = ["id", "organisationId", "deviceId", "name", "data", "timestamp", "receivedAt", "protocol"] as const
const RUN_COLUMNS = ["id", "organisationId", "commandId", "deviceId", "data", "timestamp", "protocol"] as const
const LOCATION_COLUMNS = ["id", "organisationId", "deviceId", "latitude", "longitude", "altitude", "timestamp", "receivedAt", "protocol"] as const

/**
 * One transaction for a batch: multi-row inserts by `unnest` (one prepared statement each) and
 * one device update. A batch of plain events, or of command runs only, is one statement that
 * commits on its own: one round trip instead of three (BEGIN, the insert, COMMIT), which a
 * command run waits for before it is delivered. On PGlite, a batch of `COPY_EVENTS_FROM_ROWS`
 * plain events or more goes by COPY instead, its devices' update behind it; the one-statement
 * batches go as JSON documents, run prepared (`SqlClient.write`).
 */
const writeBatch = (sql: SqlClient, items: ReadonlyArray<WriteItem>): Effect.Effect<void, SqlError> => {
  const plain = plainEvents(items)
  if (plain !== undefined && sql.dialect === "pglite" && plain.length >= COPY_EVENTS_FROM_ROWS) {
    return sql.script([
      { copy: COPY_EVENTS, data: eventsCopyText(plain) },
      { text: TOUCH_SEEN_ONE_SESSION, params: [seenDocument(lastSeen(items))] }
    ])
  }
  if (plain !== undefined) {
    const seen = lastSeen(items)
    const statement = seen.size <= DEVICES_ONE_BY_ONE
      ? INSERT_EVENTS_SEEN_ONE_BY_ONE
      : sql.dialect === "pglite"
      ? INSERT_EVENTS_TOUCH_ONE_SESSION
      : INSERT_EVENTS_TOUCH
    return sql.write(statement, [eventsDocument(plain), seenDocument(seen)])
  }
  const runsOnly = onlyRuns(items)
  if (runsOnly !== undefined) {
    return sql.dialect === "pglite"
      ? sql.write(INSERT_RUNS_DOCUMENT, [runsDocument(runsOnly)])
      : Effect.asVoid(sql.query(INSERT_RUNS, columnsOf(runsOnly, RUN_COLUMNS)))
  }
  return sql.transaction((tx) =>
    Effect.gen(function*() {
      const events: Array<EventRow> = []
      const locations: Array<LocationRow> = []
      const runs: Array<CommandRunRow> = []
      for (const item of items) {
        if (item._tag === "event") events.push(item.row)
        else if (item._tag === "location") locations.push(item.row)
        else runs.push(item.row)
      }
      const seen = lastSeen(items)
      if (events.length > 0) {
        yield* tx.query(INSERT_EVENTS, [
          ...columnsOf(events, EVENT_COLUMNS),
          // Sent as text: postgres.js encodes a boolean array with the scalar type.
          events.map((e) => String(e.file !== undefined))
        ])
        for (const e of events) {
          if (e.file === undefined) continue
          yield* tx.query(
            "INSERT INTO event_files (event_id, filename, content_type, size, bytes) VALUES ($1, $2, $3, $4, $5)",
            [e.id, e.file.filename, e.file.contentType, e.file.bytes.byteLength, e.file.bytes]
          )
        }
        const readings = events.flatMap((e) =>
          e.reading === undefined ? [] : [{ deviceId: e.deviceId, timestamp: e.timestamp, reading: e.reading, eventId: e.id }]
        )
        if (readings.length > 0) yield* writeReadings(tx, readings, "arrival")
      }
      if (locations.length > 0) {
        yield* tx.query(INSERT_LOCATIONS, columnsOf(locations, LOCATION_COLUMNS))
      }
      if (runs.length > 0) yield* tx.query(INSERT_RUNS, columnsOf(runs, RUN_COLUMNS))
      if (seen.size > 0) yield* touchDevices(tx, seen)
    })
  )
}

/** Failed on a lost connection (after `writeRetried`'s tries), not on its rows. */
export const cutOff = (exit: Exit.Exit<void, SqlError>) =>
  Exit.isFailure(exit) && exit.cause.reasons.some((r) => Cause.isFailReason(r) && isConnectionLoss(r.error))

/** `writeRetried`'s waits between attempts: doubling from 20 ms, at most a second. */
const LOST_BACKOFF = Schedule.min([Schedule.exponential("20 millis"), Schedule.spaced("1 second")])

/**
 * A batch whose connection was lost (the server terminated it, or is unreachable) is written
 * again: the pool's next pick may be another connection that died with the first and is not
 * yet seen closed, or a connection attempt begun during the outage. A batch that had committed
 * just before the loss fails again on its primary key and is refused, so the sender re-sends
 * it: stored twice at worst, never lost.
 */
export const writeRetried = (sql: SqlClient, items: ReadonlyArray<WriteItem>, retryLostForMs: number) =>
  retryFailed(writeBatch(sql, items), {
    schedule: Schedule.max([LOST_BACKOFF, Schedule.during(Duration.millis(retryLostForMs))]),
    while: isConnectionLoss
  })
