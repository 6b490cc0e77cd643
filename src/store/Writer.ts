import { Context, Effect, Exit, Layer } from "effect"
import { Unavailable } from "../domain/errors.ts"
import type { ReadingInput } from "../energy/readings.ts"
import { writeReadings } from "../energy/store.ts"
import { Sql, type SqlClient, type SqlError } from "./Sql.ts"

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
  /** Rows waiting beyond this are refused (503 / 5.03 / delayed PUBACK) instead of growing memory. */
  readonly maxPending: number
}

export const defaultWriterOptions: WriterOptions = { maxBatch: 2_000, maxPending: 20_000 }

export interface WriterService {
  /** Resolves once the transaction holding the item committed: only then may it be acknowledged. */
  write(item: WriteItem): Effect.Effect<void, Unavailable | SqlError>
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

const TOUCH_DEVICES = `UPDATE devices d SET last_seen_at = GREATEST(COALESCE(d.last_seen_at, 0), u.seen)
  FROM unnest($1::text[], $2::int8[]) AS u(id, seen) WHERE d.id = u.id`

/** One transaction for a batch: multi-row inserts by `unnest` (one prepared statement each) and one device update. */
const writeBatch = (sql: SqlClient, items: ReadonlyArray<WriteItem>) =>
  sql.transaction((tx) =>
    Effect.gen(function*() {
      const events: Array<EventRow> = []
      const locations: Array<LocationRow> = []
      const runs: Array<CommandRunRow> = []
      const seen = new Map<string, number>()
      for (const item of items) {
        if (item._tag === "event") events.push(item.row)
        else if (item._tag === "location") locations.push(item.row)
        else runs.push(item.row)
        if (item._tag !== "run") seen.set(item.row.deviceId, Math.max(seen.get(item.row.deviceId) ?? 0, item.row.receivedAt))
      }
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
      if (seen.size > 0) yield* tx.query(TOUCH_DEVICES, [[...seen.keys()], [...seen.values()]])
    })
  )

/**
 * Group commit: items that arrive while a batch is being written wait and go together in
 * the next one, so throughput grows with load while an idle writer adds no delay.
 */
export const makeWriter = (sql: SqlClient, options: WriterOptions = defaultWriterOptions) => {
  let queue: Array<Waiter> = []
  let inFlight = 0
  let flushing: Promise<void> | undefined

  const settle = (batch: ReadonlyArray<Waiter>, exit: Exit.Exit<void, SqlError>) => {
    for (const waiter of batch) waiter.resume(exit)
  }

  const flushOnce = async (): Promise<void> => {
    const batch = queue.slice(0, options.maxBatch)
    queue = queue.slice(batch.length)
    inFlight = batch.length
    const exit = await Effect.runPromiseExit(writeBatch(sql, batch.map((w) => w.item)))
    if (Exit.isSuccess(exit) || batch.length === 1) {
      settle(batch, exit)
    } else {
      // One bad row (say, its device was deleted meanwhile) must not fail its neighbours.
      for (const waiter of batch) waiter.resume(await Effect.runPromiseExit(writeBatch(sql, [waiter.item])))
    }
    inFlight = 0
  }

  const drain = async (): Promise<void> => {
    while (queue.length > 0) await flushOnce()
    flushing = undefined
  }

  const kick = () => {
    // A macrotask: whatever arrives in this turn of the event loop joins the batch.
    flushing ??= new Promise<void>((resolve) => setTimeout(resolve, 0)).then(drain)
  }

  const service: WriterService = {
    pending: () => queue.length + inFlight,
    write: (item) =>
      Effect.callback<void, Unavailable | SqlError>((resume) => {
        if (queue.length >= options.maxPending) {
          resume(Effect.fail(new Unavailable({ retryAfterSeconds: 1, message: "the store is behind; retry shortly" })))
          return
        }
        queue.push({ item, resume: (exit) => resume(exit) })
        kick()
      })
  }
  return { service, close: () => flushing ?? Promise.resolve() }
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
