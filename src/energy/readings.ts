import { Effect, Predicate } from "effect"
import { InvalidInput } from "../domain/errors.ts"
import { formatDecimal, MAX_SCALE, parseDecimal } from "./decimal.ts"
import { parseInstant } from "../domain/instant.ts"

/** Energy readings: what events named `electricity`, `gas` or `water` and bulk rows carry. */

export const ENERGY_KINDS = ["electricity", "gas", "water"] as const
export type EnergyKind = (typeof ENERGY_KINDS)[number]

export const SOURCES = ["grid", "solar", "wind", "generator", "other"] as const
export type Source = (typeof SOURCES)[number]

export const FLOWS = ["consumption", "production", "import", "export"] as const
export type Flow = (typeof FLOWS)[number]

export const isEnergyKind = (name: string): name is EnergyKind => (ENERGY_KINDS as ReadonlyArray<string>).includes(name)
const isSource = (value: unknown): value is Source => (SOURCES as ReadonlyArray<unknown>).includes(value)
const isFlow = (value: unknown): value is Flow => (FLOWS as ReadonlyArray<unknown>).includes(value)

/** One reading as sent: an amount consumed since the previous reading, or a register value. */
export interface ReadingInput {
  readonly kind: EnergyKind
  readonly source: Source
  readonly flow: Flow
  readonly mode: "value" | "meter"
  /** A plain non-negative decimal (`"0.125"`), as stored in a `numeric` column. */
  readonly amount: string
}

const invalid = (field: string, rule: string) => new InvalidInput({ field, message: `${field}: ${rule}` })

const PLAIN = new RegExp(`^\\d{1,30}(\\.\\d{1,${MAX_SCALE}})?$`)
const NUMBER_RULE = "must be a decimal number (a JSON number or a string such as \"1.25\")"

/** A JSON number or decimal string → its plain decimal text; readings and registers are never negative. */
const amountOf = (raw: unknown, field: string): string | InvalidInput => {
  if (typeof raw === "number") {
    if (!Number.isFinite(raw)) return invalid(field, NUMBER_RULE)
    if (raw < 0) return invalid(field, "must not be negative")
    const text = String(raw)
    if (PLAIN.test(text)) return text
    // 1e-7, 1e+21: exponent notation, or more places than a quantity keeps.
    const decimal = parseDecimal(raw)
    return decimal === undefined ? invalid(field, `${NUMBER_RULE} with at most ${MAX_SCALE} decimal places`) : formatDecimal(decimal)
  }
  if (typeof raw === "string") {
    if (PLAIN.test(raw)) return raw
    return invalid(field, /^-\d/.test(raw) ? "must not be negative" : NUMBER_RULE)
  }
  return invalid(field, NUMBER_RULE)
}

/**
 * Reads the energy part of `object` (an event's `data` or a bulk row): `value` or `meter`,
 * and `source`, `flow` with their defaults. `prefix` names the object in error fields.
 */
const readingFields = (kind: EnergyKind, object: Readonly<Record<string, unknown>>, prefix: string): ReadingInput | InvalidInput => {
  const hasValue = object.value !== undefined && object.value !== null
  const hasMeter = object.meter !== undefined && object.meter !== null
  if (hasValue && hasMeter) return invalid(`${prefix}meter`, "give either value (consumption since the previous reading) or meter (a register), not both")
  if (!hasValue && !hasMeter) return invalid(`${prefix}value`, "is required (or meter, a cumulative register)")
  const source = object.source ?? "grid"
  if (!isSource(source)) return invalid(`${prefix}source`, `must be one of ${SOURCES.join(", ")}; got ${JSON.stringify(source)}`)
  const flow = object.flow ?? "consumption"
  if (!isFlow(flow)) return invalid(`${prefix}flow`, `must be one of ${FLOWS.join(", ")}; got ${JSON.stringify(flow)}`)
  const mode = hasValue ? "value" : "meter"
  const amount = amountOf(hasValue ? object.value : object.meter, `${prefix}${mode}`)
  if (amount instanceof InvalidInput) return amount
  return { kind, source, flow, mode, amount }
}

/**
 * The reading an energy event carries (API-DECISIONS "Energy readings"): `data` is a number
 * (consumption since the previous reading), `{value, source?, flow?}` or `{meter, source?, flow?}`.
 */
export const readingOfEvent = (kind: EnergyKind, data: unknown): ReadingInput | InvalidInput => {
  if (typeof data === "number" || typeof data === "string") {
    const amount = amountOf(data, "data")
    return amount instanceof InvalidInput ? amount : { kind, source: "grid", flow: "consumption", mode: "value", amount }
  }
  if (!Predicate.isObject(data) || Array.isArray(data)) {
    return invalid("data", `an ${kind} event carries a number, {"value"} or {"meter"}`)
  }
  return readingFields(kind, data, "data.")
}

/** A bulk-import row, checked. */
export interface ImportRow {
  readonly deviceId: string
  readonly timestamp: number
  readonly reading: ReadingInput
}

const DEVICE_ID = /^[A-Za-z0-9_-]{1,200}$/

/**
 * `{device: {id} | "dev_…", timestamp, value | meter, source?, flow?}` (dotted `device.id`
 * also) → ImportRow; errors name the row: `rows[17].timestamp`.
 */
export const parseImportRow = (kind: EnergyKind, raw: unknown, index: number): ImportRow | InvalidInput => {
  const prefix = `rows[${index}]`
  if (!Predicate.isObject(raw) || Array.isArray(raw)) return invalid(prefix, "must be an object {device, timestamp, value | meter, source?, flow?}")
  const device = raw.device ?? raw["device.id"]
  const deviceId = typeof device === "string" ? device : Predicate.isObject(device) && !Array.isArray(device) ? device.id : undefined
  if (deviceId === undefined) return invalid(`${prefix}.device`, "is required: a device id or {\"id\"}")
  if (typeof deviceId !== "string" || !DEVICE_ID.test(deviceId)) return invalid(`${prefix}.device`, "must be a device id such as \"dev_…\" or {\"id\"}")
  if (raw.timestamp === undefined) return invalid(`${prefix}.timestamp`, "is required (epoch milliseconds or ISO-8601)")
  const timestamp = parseInstant(raw.timestamp)
  if (timestamp === undefined) return invalid(`${prefix}.timestamp`, `must be epoch milliseconds or an ISO-8601 date-time; got ${JSON.stringify(raw.timestamp)}`)
  const reading = readingFields(kind, raw, `${prefix}.`)
  if (reading instanceof InvalidInput) return reading
  return { deviceId, timestamp, reading }
}

/**
 * The reading of an event, when its name is an energy kind (`electricity`, `gas`, `water`);
 * a malformed one fails as InvalidInput (400 over REST, the protocol's code elsewhere).
 */
export const energyReadingOf = (name: string, data: unknown): Effect.Effect<ReadingInput | undefined, InvalidInput> => {
  if (!isEnergyKind(name)) return Effect.succeed(undefined)
  const reading = readingOfEvent(name, data)
  return reading instanceof InvalidInput ? Effect.fail(reading) : Effect.succeed(reading)
}
