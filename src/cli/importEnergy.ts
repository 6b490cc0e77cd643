import { Console, Effect, Option, Schema } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { stat } from "node:fs/promises"
import { basename } from "node:path"
import { InvalidInput } from "../domain/errors.ts"
import { importReadings, MAX_IMPORT_ROWS, parseImportText } from "../energy/import.ts"
import { ENERGY_KINDS, type EnergyKind, type ImportRow } from "../energy/readings.ts"
import { findOrganisation, type Organisation } from "../store/recovery.ts"
import { Sql, type SqlClient } from "../store/Sql.ts"
import { makeProgress } from "./progress.ts"
import { rowBatches, RowFileError } from "./rowFile.ts"
import { cliStore } from "./store.ts"

/** An import that stopped; `message` names the file's line and field, and what was imported. */
export class ImportRefused extends Schema.TaggedError<ImportRefused>()("ImportRefused", {
  message: Schema.String
}) {}

/** Rows per transaction by default: near the throughput of the largest, with row locks held a fraction as long. */
export const DEFAULT_BATCH_SIZE = 10_000

const count = (n: number) => n.toLocaleString("en-US")

/** The exit code of an import a signal stopped: 128 + SIGINT's number, as a shell reports it. */
const INTERRUPTED = 130

/** `rows[17].timestamp: must be …` → `data.ndjson line 19: timestamp: must be …`. */
const atLine = (file: string, line: number, error: InvalidInput): string => {
  const field = error.field.replace(/^rows\[\d+\]\.?/, "")
  const rule = error.message.startsWith(`${error.field}: `) ? error.message.slice(error.field.length + 2) : error.message
  return `${file} line ${line}: ${field === "" ? "" : `${field}: `}${rule}`
}

/** A refusal found while checking: nothing is imported yet. */
class CheckFailed extends Error {}

const NOTHING = "; nothing was imported"

interface Checked {
  readonly rows: number
  /** Each device named, and the first line naming it. */
  readonly devices: Map<string, number>
}

/**
 * The first pass: every row parsed and checked by the HTTP import's rules, before anything is
 * written, so a bad row anywhere leaves the database as it was. Progress in bytes, the rows
 * not being counted yet.
 */
const checkFile = async (path: string, file: string, kind: EnergyKind, batchSize: number, size: number): Promise<Checked> => {
  const progress = makeProgress(process.stderr, { label: "checking", total: size, unit: "bytes" })
  const devices = new Map<string, number>()
  let bytes = 0
  let rows = 0
  try {
    for await (const batch of rowBatches(path, batchSize, (read) => progress.update(bytes += read))) {
      for (const { line, text } of batch) {
        const row = parseImportText(kind, text, rows++)
        if (row instanceof InvalidInput) throw new CheckFailed(atLine(file, line, row) + NOTHING)
        if (!devices.has(row.deviceId)) devices.set(row.deviceId, line)
      }
    }
  } catch (cause) {
    if (cause instanceof RowFileError) throw new CheckFailed(`${file} line ${cause.line}: ${cause.message}${NOTHING}`)
    throw cause
  } finally {
    progress.finish()
  }
  return { rows, devices }
}

/** Device ids per query: an `ANY($1)` array stays a modest parameter. */
const DEVICE_CHUNK = 10_000

/** Every device named must be the organisation's (as the HTTP import checks per request): the first stranger is named by its line. */
const checkDevices = Effect.fnUntraced(function*(sql: SqlClient, organisation: Organisation, devices: Map<string, number>, file: string) {
  const ids = [...devices.keys()]
  const known = new Set<string>()
  for (let i = 0; i < ids.length; i += DEVICE_CHUNK) {
    const rows = yield* sql.query<{ id: string }>(
      "SELECT id FROM devices WHERE id = ANY($1::text[]) AND organisation_id = $2",
      [ids.slice(i, i + DEVICE_CHUNK), organisation.id]
    )
    for (const row of rows) known.add(row.id)
  }
  const strangers = ids.filter((id) => !known.has(id)).sort((a, b) => devices.get(a)! - devices.get(b)!)
  if (strangers.length > 0) {
    const id = strangers[0]
    return yield* new ImportRefused({
      message: `${file} line ${devices.get(id)}: device: device ${id} not found in ${organisation.name} (${organisation.id})${NOTHING}`
    })
  }
})

const readFailure = (file: string) => (cause: unknown) =>
  new ImportRefused({
    message: cause instanceof CheckFailed ? cause.message : `cannot read ${file}: ${cause instanceof Error ? cause.message : String(cause)}`
  })

interface ImportInput {
  readonly path: string
  readonly kind: EnergyKind
  readonly organisationId: Option.Option<string>
  readonly batchSize: number
}

/**
 * Imports an NDJSON or JSON-array file of any size: checked whole first (a bad row or an
 * unknown device stops it with nothing imported), then written in batches of `batchSize`
 * rows through `importReadings`, each batch in its own transaction, as that many HTTP import
 * requests would be. `meter` rows continue from the stored register batch after batch, so a
 * meter's rows in timestamp order give the figures of a single import.
 */
export const importEnergy = Effect.fnUntraced(function*(input: ImportInput) {
  const sql = yield* Sql
  const file = basename(input.path)
  const started = performance.now()
  const organisation = yield* findOrganisation(sql, input.organisationId)
  const size = yield* Effect.tryPromise({ try: () => stat(input.path).then((s) => s.size), catch: readFailure(file) })
  const checked = yield* Effect.tryPromise({
    try: () => checkFile(input.path, file, input.kind, input.batchSize, size),
    catch: readFailure(file)
  })
  if (checked.rows === 0) return yield* new ImportRefused({ message: `${file}: holds no rows${NOTHING}` })
  yield* checkDevices(sql, organisation, checked.devices, file)

  const progress = makeProgress(process.stderr, { label: "importing", total: checked.rows, unit: "rows" })
  const batches = rowBatches(input.path, input.batchSize)
  let imported = 0
  let stored = 0
  let baselines = 0
  let throughLine = 0
  const sofar = () =>
    imported === 0 ? "nothing was imported" : `the ${count(imported)} rows through line ${throughLine} were imported, the rest not`
  yield* Effect.gen(function*() {
    while (true) {
      const next = yield* Effect.tryPromise({ try: () => batches.next(), catch: readFailure(file) })
      if (next.done) break
      const rows = new Array<ImportRow>(next.value.length)
      for (let i = 0; i < rows.length; i++) {
        const { line, text } = next.value[i]
        const row = parseImportText(input.kind, text, imported + i)
        if (row instanceof InvalidInput) {
          return yield* new ImportRefused({ message: `${atLine(file, line, row)} (the file changed while it was imported); ${sofar()}` })
        }
        rows[i] = row
      }
      // A batch under way is committed and counted before an interruption stops the import
      // (counted inside: once the region ends, the interruption comes first): the count said is exact.
      yield* Effect.uninterruptible(Effect.tap(importReadings(sql, organisation.id, rows), (outcome) =>
        Effect.sync(() => {
          imported += outcome.imported
          stored += outcome.stored
          baselines += outcome.baselines
          throughLine = next.value.at(-1)!.line
        }))).pipe(
          Effect.mapError((error) =>
            new ImportRefused({
              message: `${file} lines ${next.value[0].line}–${next.value.at(-1)!.line}: ${error.message}; ${sofar()}`
            })
          )
        )
      progress.update(imported)
    }
  }).pipe(
    Effect.ensuring(Effect.sync(() => progress.finish())),
    Effect.onInterrupt(() =>
      Effect.andThen(
        Console.error(`voltaic: interrupted: ${sofar()}`),
        // Not a success: a script running the import sees it stopped half-way.
        Effect.sync(() => void (process.exitCode = INTERRUPTED))
      )
    )
  )
  const seconds = (performance.now() - started) / 1000
  yield* Console.log(
    `Imported ${count(imported)} ${input.kind} rows from ${file} into ${organisation.name} (${organisation.id}): ` +
      `${count(stored)} readings stored, ${count(baselines)} meter baselines set, in ${seconds.toFixed(1)} s ` +
      `(${count(Math.round(imported / seconds))} rows/s).`
  )
})

/** `voltaic import energy FILE`: readings from a file, on the database directly. */
export const importEnergyCommand = Command.make(
  "energy",
  {
    file: Argument.File("file", { mustExist: true }).pipe(
      Argument.withDescription("NDJSON, or a JSON array, of rows {device, timestamp, value | meter, source?, flow?}, as the HTTP import takes")
    ),
    kind: Flag.Literals("kind", ENERGY_KINDS).pipe(Flag.withDescription("What the readings measure")),
    organisation: Flag.String("organisation").pipe(
      Flag.withDescription("Id of the organisation owning the devices, org_… (default: the first organisation)"),
      Flag.optional
    ),
    batchSize: Flag.Int("batch-size").pipe(
      Flag.withDescription(`Rows per transaction, at most ${count(MAX_IMPORT_ROWS)} (an HTTP import's limit)`),
      Flag.filter((n) => n >= 1 && n <= MAX_IMPORT_ROWS, (n) => `must be from 1 to ${MAX_IMPORT_ROWS}, got ${n}`),
      Flag.withDefault(DEFAULT_BATCH_SIZE)
    )
  },
  ({ file, kind, organisation, batchSize }) =>
    importEnergy({ path: file, kind, organisationId: organisation, batchSize }).pipe(Effect.provide(cliStore("import energy")))
).pipe(
  Command.withDescription("Import energy readings from a file of any size: all checked first, then written in batches")
)

/** `voltaic import`: bulk data. */
export const importCommand = Command.make("import").pipe(
  Command.withDescription("Import data from files"),
  Command.withSubcommands([importEnergyCommand])
)
