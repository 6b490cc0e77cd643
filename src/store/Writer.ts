import { Cause, Context, Duration, Effect, Exit, Layer, Schedule } from "effect"
import { Unavailable } from "../domain/errors.ts"
import type { ReadingInput } from "../energy/readings.ts"
import { writeReadings } from "../energy/store.ts"
import { touchDevices } from "./devices.ts"
import { isConnectionLoss, Sql, type SqlClient, type SqlError } from "./Sql.ts"

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

export interface WriterOptions {
  /** Rows one flush writes at most. */
  readonly maxBatch: number
  /** Rows waiting beyond this are refused (503 / 5.03) instead of growing memory. */
  readonly maxPending: number
  /**
   * Rows waiting beyond this are refused even to a sender that can wait (`submit` with `wait`):
   * MQTT, whose connections aedes stops reading until their publishes are answered, so each
   * connection has at most one socket read of publishes waiting.
   */
  readonly maxWaiting: number
  /** Batches being written at once: the next one is built and sent while one commits. */
  readonly maxFlushes: number
  /**
   * The least time between the starts of two batches written one at a time: what arrives
   * meanwhile waits and joins the next. A writer idle for this long writes at once.
   */
  readonly flushEveryMs: number
  /**
   * How long a batch whose connection was lost is written again (with a backoff up to 1 s)
   * before it is answered with the failure: a short outage delays acknowledgements instead of
   * refusing them, while the waiting items stay bounded by `maxPending` and `maxWaiting`.
   */
  readonly retryLostForMs: number
}

/**
 * `flushEveryMs`: each batch costs about as much as ten events (Postgres ~200 µs for the
 * statement and its commit, plus a socket write and read here, and the wake-ups of both
 * processes). Flushing back to back at 5,000 events/s made batches of ~5 at ~900 a second;
 * 2 ms makes them ~10 at ~500 a second. bench:ingest's latency case on Postgres, three
 * alternating pairs: the machine's busy cores 1.35 → 0.98 (Postgres 0.40 → 0.25, this process
 * 0.48 → 0.36), publish → subscriber p99 9.9 / 22.5 / 20.8 → 9.9 / 8.9 / 19.2 ms, for 1.1 ms
 * more at the median (1.9 → 3.0 ms).
 */
export const defaultWriterOptions: WriterOptions = {
  maxBatch: 2_000,
  maxPending: 20_000,
  maxWaiting: 100_000,
  maxFlushes: 2,
  flushEveryMs: 2,
  retryLostForMs: 10_000
}

/** The store is behind: the item was not taken. */
export const storeBehind = new Unavailable({ retryAfterSeconds: 1, message: "the store is behind; retry shortly" })

export interface WriterService {
  /** Resolves once the transaction holding the item committed: only then may it be acknowledged. */
  write(item: WriteItem): Effect.Effect<void, Unavailable | SqlError>
  /**
   * `write` without a fiber: `done` is called once the item's batch committed (or failed).
   * Answers false, without calling `done`, when the store is behind; `wait` lets the item in
   * up to `maxWaiting` instead of `maxPending` (a sender held back by its transport).
   */
  submit(item: WriteItem, done: (exit: Exit.Exit<void, SqlError>) => void, wait?: boolean): boolean
  /** Items waiting or being written now (for back-pressure decisions and metrics). */
  readonly pending: () => number
}

interface Waiter {
  readonly item: WriteItem
  readonly resume: (exit: Exit.Exit<void, SqlError>) => void
}

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
 * The common batch, events without files or readings, as one statement: it commits on its own
 * (one round trip, no BEGIN/COMMIT), inserting the events and touching their devices together.
 * Devices are touched as `touchDevices` does (locked in id order). Rows go as one JSON document
 * (`eventsDocument`), which costs the server a parse instead of costing this process the
 * escaping of ten text arrays; `$1::text` keeps the driver from serialising the text again as JSON.
 *
 * Devices are found by `id = ANY(ARRAY(…))`, which the generic plan of this prepared statement
 * serves from the primary key: with `IN (SELECT …)` over a function scan (estimated at 100 rows)
 * it scanned the whole `devices` table twice per batch whenever that table was small, and the
 * batch cost Postgres 0.35 instead of 0.25 core at 5,000 events/s in batches of 9.
 */
const INSERT_EVENTS_TOUCH = `WITH inserted AS (
    INSERT INTO events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol, has_file)
    SELECT u.id, u.org, u.dev, u.name, u.data -> 0, u.ts, u.rcv, u.proto, false
    FROM jsonb_to_recordset($1::text::jsonb) AS u(id text, org text, dev text, name text, data jsonb, ts int8, rcv int8, proto text)
    RETURNING 1
  ),
  seen AS (SELECT * FROM jsonb_to_recordset($2::text::jsonb) AS s(id text, at int8)),
  locked AS (SELECT id FROM devices WHERE id = ANY(ARRAY(SELECT id FROM seen)) ORDER BY id FOR NO KEY UPDATE)
  UPDATE devices d SET last_seen_at = GREATEST(COALESCE(d.last_seen_at, 0), seen.at)
  FROM seen WHERE d.id = seen.id AND d.id = ANY(ARRAY(SELECT id FROM locked))`

/**
 * Events as a JSON array of records. `data` is already JSON text and goes in as it is, inside a
 * one-element array (`u.data -> 0`), so that JSON null stays a JSON null and no data stays SQL NULL.
 */
const eventsDocument = (events: ReadonlyArray<EventRow>): string => {
  const parts: Array<string> = []
  for (const e of events) {
    parts.push(
      `{"id":${JSON.stringify(e.id)},"org":${JSON.stringify(e.organisationId)},"dev":${JSON.stringify(e.deviceId)},"name":${
        JSON.stringify(e.name)
      },"data":${e.data === null ? "null" : `[${e.data}]`},"ts":${e.timestamp},"rcv":${e.receivedAt},"proto":${JSON.stringify(e.protocol)}}`
    )
  }
  return `[${parts.join(",")}]`
}

const seenDocument = (seen: ReadonlyMap<string, number>): string => {
  const parts: Array<string> = []
  for (const [id, at] of seen) parts.push(`{"id":${JSON.stringify(id)},"at":${at}}`)
  return `[${parts.join(",")}]`
}

/** Each device's latest receipt in a batch (command runs say nothing about the device). */
const lastSeen = (items: ReadonlyArray<WriteItem>) => {
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

/** One transaction for a batch: multi-row inserts by `unnest` (one prepared statement each) and one device update. */
const writeBatch = (sql: SqlClient, items: ReadonlyArray<WriteItem>): Effect.Effect<void, SqlError> => {
  const plain = plainEvents(items)
  if (plain !== undefined) {
    return Effect.asVoid(sql.query(INSERT_EVENTS_TOUCH, [eventsDocument(plain), seenDocument(lastSeen(items))]))
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
          events.map((e) => e.id),
          events.map((e) => e.organisationId),
          events.map((e) => e.deviceId),
          events.map((e) => e.name),
          events.map((e) => e.data),
          events.map((e) => e.timestamp),
          events.map((e) => e.receivedAt),
          events.map((e) => e.protocol),
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
        yield* tx.query(INSERT_LOCATIONS, [
          locations.map((l) => l.id),
          locations.map((l) => l.organisationId),
          locations.map((l) => l.deviceId),
          locations.map((l) => l.latitude),
          locations.map((l) => l.longitude),
          locations.map((l) => l.altitude),
          locations.map((l) => l.timestamp),
          locations.map((l) => l.receivedAt),
          locations.map((l) => l.protocol)
        ])
      }
      if (runs.length > 0) {
        yield* tx.query(INSERT_RUNS, [
          runs.map((r) => r.id),
          runs.map((r) => r.organisationId),
          runs.map((r) => r.commandId),
          runs.map((r) => r.deviceId),
          runs.map((r) => r.data),
          runs.map((r) => r.timestamp),
          runs.map((r) => r.protocol)
        ])
      }
      if (seen.size > 0) yield* touchDevices(tx, seen)
    })
  )
}

/** Failed on a lost connection (after `writeRetried`'s tries), not on its rows. */
const cutOff = (exit: Exit.Exit<void, SqlError>) =>
  Exit.isFailure(exit) && exit.cause.reasons.some((r) => Cause.isFailReason(r) && isConnectionLoss(r.error))

/**
 * A batch whose connection was lost (the server terminated it, or is unreachable) is written
 * again: the pool's next pick may be another connection that died with the first and is not
 * yet seen closed, or a connection attempt begun during the outage. A batch that had committed
 * just before the loss fails again on its primary key and is refused, so the sender re-sends
 * it: stored twice at worst, never lost.
 */
const writeRetried = (sql: SqlClient, items: ReadonlyArray<WriteItem>, retryLostForMs: number) =>
  writeBatch(sql, items).pipe(Effect.retry({
    schedule: Schedule.max([
      Schedule.min([Schedule.exponential("20 millis"), Schedule.spaced("1 second")]),
      Schedule.during(Duration.millis(retryLostForMs))
    ]),
    while: isConnectionLoss
  }))

/**
 * Group commit: items that arrive while batches are being written, or within `flushEveryMs` of
 * the last batch's start, wait and go together in the next one, so throughput grows with load
 * while an idle writer adds no delay. Up to `maxFlushes` batches are written at once; they are
 * answered in the order they were taken, so a device's acknowledgements and deliveries keep the
 * order of its writes.
 */
export const makeWriter = (sql: SqlClient, options: Partial<WriterOptions> = {}) => {
  const { maxBatch, maxFlushes, maxPending, maxWaiting, flushEveryMs, retryLostForMs } = { ...defaultWriterOptions, ...options }
  const secondFlushAt = Math.max(1, Math.floor(maxBatch / 4))
  let queue: Array<Waiter> = []
  let writing = 0
  let flushes = 0
  let scheduled = false
  /** When the last batch started (performance.now()). */
  let lastStart = -Infinity
  /** Settles after the last batch taken was answered: batches are answered in order. */
  let answered: Promise<void> = Promise.resolve()
  let idle: Array<() => void> = []

  const resumeAll = (batch: ReadonlyArray<Waiter>, exits: Exit.Exit<void, SqlError> | ReadonlyArray<Exit.Exit<void, SqlError>>) => {
    for (let i = 0; i < batch.length; i++) batch[i].resume(Array.isArray(exits) ? exits[i] : exits as Exit.Exit<void, SqlError>)
  }

  const writeOne = async (batch: ReadonlyArray<Waiter>): Promise<Exit.Exit<void, SqlError> | Array<Exit.Exit<void, SqlError>>> => {
    const exit = await Effect.runPromiseExit(writeRetried(sql, batch.map((w) => w.item), retryLostForMs))
    if (Exit.isSuccess(exit) || batch.length === 1 || cutOff(exit)) return exit
    // One bad row (say, its device was deleted meanwhile) must not fail its neighbours.
    const exits: Array<Exit.Exit<void, SqlError>> = []
    for (const waiter of batch) {
      const last = exits.at(-1)
      // The store was lost meanwhile and stayed lost: the rest is not tried one by one.
      exits.push(last !== undefined && cutOff(last) ? last : await Effect.runPromiseExit(writeRetried(sql, [waiter.item], retryLostForMs)))
    }
    return exits
  }

  /**
   * An idle writer flushes at once. With a batch in flight, another starts only for a
   * sizeable backlog: a trickle waits the one round trip and goes as one batch (each batch
   * costs a statement, a socket write here and a commit there, whatever its size).
   */
  const worthFlushing = () => queue.length > 0 && (flushes === 0 || (flushes < maxFlushes && queue.length >= secondFlushAt))

  const flush = () => {
    scheduled = false
    // A lone batch (none in flight) waits out `flushEveryMs`; a second one is for a backlog.
    const early = flushes === 0 ? lastStart + flushEveryMs - performance.now() : 0
    if (early > 0 && worthFlushing()) {
      scheduled = true
      setTimeout(flush, early)
      return
    }
    if (worthFlushing()) lastStart = performance.now()
    while (worthFlushing()) {
      const batch = queue.length <= maxBatch ? queue : queue.slice(0, maxBatch)
      queue = queue.length <= maxBatch ? [] : queue.slice(maxBatch)
      flushes += 1
      writing += batch.length
      const written = writeOne(batch)
      const previous = answered
      answered = written.then(async (exits) => {
        await previous
        writing -= batch.length
        resumeAll(batch, exits)
      })
      void written.then(() => {
        flushes -= 1
        if (queue.length > 0) schedule()
        else if (flushes === 0) void answered.then(() => {
          if (flushes > 0 || queue.length > 0) return
          const waiting = idle
          idle = []
          for (const resolve of waiting) resolve()
        })
      })
    }
  }

  const schedule = () => {
    if (scheduled || !worthFlushing()) return
    scheduled = true
    // Whatever arrives in this turn of the event loop (the rest of a socket read, other
    // connections' packets) joins the batch.
    setImmediate(flush)
  }

  const submit: WriterService["submit"] = (item, done, wait = false) => {
    if (queue.length >= (wait ? maxWaiting : maxPending)) return false
    queue.push({ item, resume: done })
    schedule()
    return true
  }

  const service: WriterService = {
    pending: () => queue.length + writing,
    submit,
    write: (item) =>
      Effect.callback<void, Unavailable | SqlError>((resume) => {
        if (!submit(item, resume)) resume(Effect.fail(storeBehind))
      })
  }
  const close = () =>
    queue.length === 0 && flushes === 0 && writing === 0
      ? Promise.resolve()
      : new Promise<void>((resolve) => idle.push(resolve))
  return { service, close }
}

export class Writer extends Context.Service<Writer, WriterService>()("voltaic/store/Writer") {
  static readonly layer = Layer.effect(
    Writer,
    Effect.gen(function*() {
      const sql = yield* Sql
      const writer = yield* Effect.acquireRelease(
        Effect.sync(() => makeWriter(sql)),
        (w) => Effect.promise(() => w.close())
      )
      return writer.service
    })
  )
}
