import { Effect } from "effect"
import { InvalidInput } from "../domain/errors.ts"
import { screen } from "../ingest/payload.ts"
import type { SqlClient, SqlError } from "../store/Sql.ts"
import { type EnergyKind, type ImportRow, parseImportRow } from "./readings.ts"
import { type Placement, SeriesCache } from "./series.ts"
import { writeReadings } from "./store.ts"

/** Rows one bulk-import request may carry. */
export const MAX_IMPORT_ROWS = 100_000

export interface ImportOutcome {
  /** Rows accepted. */
  readonly imported: number
  /** Readings stored: every `value` row and every `meter` row after a meter's first. */
  readonly stored: number
  /** `meter` rows that set a meter's first baseline. */
  readonly baselines: number
}

const malformed = (field: string, error: unknown) =>
  new InvalidInput({ field, message: `${field}: must be valid JSON (${error instanceof Error ? error.message : "parse error"})` })

/** NDJSON lines in one `JSON.parse` (the fast path); [] when that fails. */
const parseLines = (lines: ReadonlyArray<string>): Array<unknown> => {
  try {
    const parsed: unknown = JSON.parse(`[${lines.join(",")}]`)
    return Array.isArray(parsed) ? parsed : []
  } catch {
    return []
  }
}

/**
 * A JSON array, or NDJSON (one JSON object per line; blank lines are skipped), → rows,
 * stopping at the first bad one: its field is named `rows[17].timestamp`.
 */
export const parseImportBody = (kind: EnergyKind, text: string): Array<ImportRow> | InvalidInput => {
  const trimmed = text.trim()
  if (trimmed === "") return new InvalidInput({ field: "body", message: "body: no rows; send a JSON array or NDJSON of readings" })
  const tooMany = new InvalidInput({ field: "body", message: `body: at most ${MAX_IMPORT_ROWS} rows per request; split the import` })
  let raws: Array<unknown>
  // The payload policy, depth included, is applied to the parsed rows (`screen`), not to the
  // text first as elsewhere: V8's JSON.parse is iterative (a million levels parse, on Node 20
  // and 24), and `screen` stops at the first level too deep, so nothing recursive meets a
  // deeper value. A text scan of a 10 MB body cost a sixth of the import's own work.
  if (trimmed.startsWith("[")) {
    let parsed: unknown
    try {
      parsed = JSON.parse(trimmed)
    } catch (error) {
      return malformed("body", error)
    }
    if (!Array.isArray(parsed)) return new InvalidInput({ field: "body", message: "body: must be a JSON array or NDJSON of readings" })
    if (parsed.length > MAX_IMPORT_ROWS) return tooMany
    raws = parsed
  } else {
    const lines = trimmed.split("\n").filter((line) => line.trim() !== "")
    if (lines.length > MAX_IMPORT_ROWS) return tooMany
    raws = parseLines(lines)
    if (raws.length !== lines.length) {
      // Some line is not one JSON value: find it.
      for (let i = 0; i < lines.length; i++) {
        try {
          JSON.parse(lines[i])
        } catch (error) {
          return malformed(`rows[${i}]`, error)
        }
      }
      return new InvalidInput({ field: "body", message: "body: NDJSON must hold one JSON object per line" })
    }
  }
  const breach = screen(raws, "rows")
  if (breach !== undefined) return breach
  const rows = new Array<ImportRow>(raws.length)
  for (let i = 0; i < raws.length; i++) {
    const row = parseImportRow(kind, raws[i], i)
    if (row instanceof InvalidInput) return row
    rows[i] = row
  }
  return rows
}

/**
 * One row's JSON text (an NDJSON line, an element of a JSON array) → row, by the rules
 * `parseImportBody` applies to each row of a body: the payload policy (depth included) on the
 * parsed row, then `parseImportRow`. Errors name the row as `rows[index]`. For readers of rows
 * one at a time: `voltaic import energy` streams files of any size through it.
 */
export const parseImportText = (kind: EnergyKind, text: string, index: number): ImportRow | InvalidInput => {
  const field = `rows[${index}]`
  // Depth too is screened after parsing, as in a body (see parseImportBody).
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (error) {
    return malformed(field, error)
  }
  // Inside an array, as in a body: the same depth count, and the field named `rows[0]…`.
  const breach = screen([raw], "rows")
  if (breach === undefined) return parseImportRow(kind, raw, index)
  const named = field + breach.field.slice("rows[0]".length)
  return new InvalidInput({ field: named, message: named + breach.message.slice(breach.field.length) })
}

/** Series ids per database client (see SeriesCache). */
const seriesCaches = new WeakMap<SqlClient, SeriesCache>()

/**
 * Stores every row or none: the devices must belong to the organisation (else the first
 * row naming a stranger is refused), then readings, rollups and meter baselines are written
 * in one transaction. Register rows are taken in timestamp order per meter, continuing from
 * the stored baseline.
 */
export const importReadings = Effect.fnUntraced(function*(
  sql: SqlClient,
  organisationId: string,
  rows: ReadonlyArray<ImportRow>
): Effect.fn.Return<ImportOutcome, InvalidInput | SqlError> {
  let cache = seriesCaches.get(sql)
  if (cache === undefined) seriesCaches.set(sql, cache = new SeriesCache())
  const series = cache
  const deviceIds = [...new Set(rows.map((r) => r.deviceId))]
  const outcome = yield* sql.transaction((tx) =>
    Effect.gen(function*() {
      const known = yield* tx.query<{ id: string; space_id: string }>(
        "SELECT id, COALESCE(space_id, '') AS space_id FROM devices WHERE id = ANY($1::text[]) AND organisation_id = $2",
        [deviceIds, organisationId]
      )
      if (known.length < deviceIds.length) {
        const ids = new Set(known.map((k) => k.id))
        const index = rows.findIndex((r) => !ids.has(r.deviceId))
        const field = `rows[${index}].device`
        return yield* new InvalidInput({ field, message: `${field}: device ${rows[index].deviceId} not found` })
      }
      const placement: Placement = { organisationId, spaces: new Map(known.map((k) => [k.id, k.space_id])), cache: series }
      return yield* writeReadings(
        tx,
        rows.map((r) => ({ deviceId: r.deviceId, timestamp: r.timestamp, reading: r.reading, eventId: null })),
        "timestamp",
        placement
      )
    })
  )
  return { imported: rows.length, ...outcome }
})
