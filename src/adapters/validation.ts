import { z } from "@hono/zod-openapi"
import { InvalidInput } from "../domain/errors.ts"

/**
 * Validation of REST bodies and queries, MQTT payloads and CoAP payloads against the zod
 * schemas, with one wording for every protocol (API-DECISIONS "Errors": a message names the
 * field and the rule, `longitude: is required`, `name: must be at most 200 characters`).
 * A message written in a schema (`{ message }`, a refinement, a transform's issue) wins over
 * this map: zod asks a parse's own `error` map only for issues without one.
 */

type RawIssue = z.core.$ZodRawIssue

const TYPE_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  bigint: "an integer",
  boolean: "a boolean",
  object: "an object",
  record: "an object",
  array: "an array",
  tuple: "an array",
  set: "an array",
  null: "null",
  date: "a date",
  file: "a file"
}

const FORMAT_NAMES: Record<string, string> = {
  email: "an e-mail address",
  url: "a URL",
  uuid: "a UUID",
  datetime: "an ISO-8601 date-time",
  date: "an ISO-8601 date",
  time: "an ISO-8601 time",
  duration: "an ISO-8601 duration",
  ipv4: "an IPv4 address",
  ipv6: "an IPv6 address",
  base64: "base64 text",
  base64url: "base64url text",
  jwt: "a JWT"
}

const UNITS: Record<string, string> = { string: "characters", array: "items", set: "items", file: "bytes" }

const listed = (values: ReadonlyArray<unknown>): string => values.map((value) => typeof value === "string" ? value : JSON.stringify(value) ?? String(value)).join(", ")

/** A number schema's bounds, leaving out the ±2^53 that `.int()` implies. */
const boundsOf = (schema: unknown): { min: number | undefined; max: number | undefined; int: boolean } | undefined => {
  if (!(schema instanceof z.ZodNumber)) return undefined
  const bound = (value: number | null) => value === null || !Number.isFinite(value) || Math.abs(value) >= Number.MAX_SAFE_INTEGER ? undefined : value
  return { min: bound(schema.minValue), max: bound(schema.maxValue), int: schema.isInt }
}

/** `must be an integer from 1 to 200`, when the number has both bounds. */
const numberRange = (schema: unknown): string | undefined => {
  const bounds = boundsOf(schema)
  if (bounds?.min === undefined || bounds.max === undefined) return undefined
  return `must be ${bounds.int ? "an integer" : "a number"} from ${bounds.min} to ${bounds.max}`
}

const invalidType = (issue: Extract<RawIssue, { code: "invalid_type" }>): string => {
  if (issue.input === undefined || issue.expected === "nonoptional") return "is required"
  if (issue.expected === "int" || (issue.expected === "number" && boundsOf(issue.schema)?.int === true)) {
    return numberRange(issue.schema) ?? "must be an integer"
  }
  if (issue.expected === "number" && typeof issue.input === "number") return "must be a finite number"
  if (issue.expected === "never" || issue.expected === "undefined" || issue.expected === "void") return "is not accepted here"
  return `must be ${TYPE_NAMES[issue.expected] ?? issue.expected}`
}

const bound = (issue: Extract<RawIssue, { code: "too_small" | "too_big" }>): string => {
  const small = issue.code === "too_small"
  const limit = small ? issue.minimum : issue.maximum
  const unit = UNITS[issue.origin]
  if (unit !== undefined) {
    if (issue.exact) return `must be exactly ${limit} ${unit}`
    if (small && Number(limit) === 1 && issue.inclusive !== false) return "must not be empty"
    const have = issue.origin === "string" ? "be" : "have"
    return `must ${have} ${small ? "at least" : "at most"} ${limit} ${unit}`
  }
  if (issue.inclusive === false) return `must be ${small ? "greater" : "less"} than ${limit}`
  return numberRange(issue.schema) ?? `must be ${small ? "at least" : "at most"} ${limit}`
}

const invalidFormat = (issue: Extract<RawIssue, { code: "invalid_format" }>): string => {
  switch (issue.format) {
    case "starts_with":
      return `must start with ${JSON.stringify(issue.prefix)}`
    case "ends_with":
      return `must end with ${JSON.stringify(issue.suffix)}`
    case "includes":
      return `must contain ${JSON.stringify(issue.includes)}`
    case "regex":
      return `must match ${issue.pattern ?? "the expected pattern"}`
    default:
      return `must be ${FORMAT_NAMES[issue.format] ?? `in ${issue.format} format`}`
  }
}

const invalidUnion = (issue: Extract<RawIssue, { code: "invalid_union" }>): string => {
  if (issue.inclusive === false) return "must match exactly one of the accepted forms"
  if (issue.discriminator !== undefined && issue.options !== undefined) {
    const input = issue.input
    const given = typeof input === "object" && input !== null ? (input as Record<string, unknown>)[issue.discriminator] : undefined
    return given === undefined ? "is required" : `must be one of ${listed(issue.options)}`
  }
  // `firstIssue` names the most helpful option's own issue instead; this is the fallback.
  return "must match one of the accepted forms"
}

/** `; a key must be at least 2 characters`: the rule a record's key or a map's element broke. */
const because = (subject: string, issues: ReadonlyArray<z.core.$ZodIssue>): string =>
  issues.length === 0 ? "" : `; ${subject} ${issues[0].message}`

/** The rule an issue breaks, in our wording. */
const ruleOf = (issue: RawIssue): string => {
  switch (issue.code) {
    case "invalid_type":
      return invalidType(issue)
    case "too_small":
    case "too_big":
      return bound(issue)
    case "invalid_format":
      return invalidFormat(issue)
    case "invalid_value":
      if (issue.input === undefined) return "is required"
      return issue.values.length === 1 ? `must be ${listed(issue.values)}` : `must be one of ${listed(issue.values)}`
    case "not_multiple_of":
      return `must be a multiple of ${issue.divisor}`
    case "unrecognized_keys":
      return "is not a known field"
    case "invalid_union":
      return invalidUnion(issue)
    case "invalid_key":
      return `is not an accepted key${because("a key", issue.issues)}`
    case "invalid_element":
      return `is not an accepted element${because("an element", issue.issues)}`
    case "custom":
      return "is not accepted"
  }
}

/** zod's per-parse error map: every issue without a message of its own gets ours. */
export const inputErrorMap: z.core.$ZodErrorMap = (issue) => ruleOf(issue)

/** `rows[17].timestamp`, `device.id`. */
const fieldName = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((name, part) =>
    typeof part === "number" ? `${name}[${part}]` : name === "" ? String(part) : `${name}.${String(part)}`, "")

type Issue = z.core.$ZodIssue

/**
 * How far an option of a union got with the value, lower is better: an option that refused
 * the value's type outright ranks last, then the one missing fewer fields, then the one with
 * fewer issues. Ties go to the earlier option, which is the principal form (a coordinate is a
 * number; a numeric string is also taken).
 */
const rank = (issues: ReadonlyArray<Issue>): [number, number, number] => {
  const refused = issues.some((issue) => issue.path.length === 0 && (issue.code === "invalid_type" || issue.code === "invalid_value"))
  const missing = issues.filter((issue) => issue.message === "is required").length
  return [refused ? 1 : 0, missing, issues.length]
}

const better = (a: [number, number, number], b: [number, number, number]) =>
  a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] < b[1] : a[2] < b[2]

/** The issue to report and its full path: a union's best option, followed down to its own issue. */
const leaf = (issue: Issue, base: ReadonlyArray<PropertyKey>): { issue: Issue; path: ReadonlyArray<PropertyKey> } => {
  const path = [...base, ...issue.path]
  if (issue.code === "unrecognized_keys") return { issue, path: [...path, issue.keys[0]] }
  if (issue.code !== "invalid_union" || issue.errors.length === 0) return { issue, path }
  let best = issue.errors.find((option) => option.length > 0)
  if (best === undefined) return { issue, path }
  for (const option of issue.errors) {
    if (option.length > 0 && better(rank(option), rank(best))) best = option
  }
  return leaf(best[0], path)
}

/**
 * The first issue as `InvalidInput` naming its field (`name: is required`); an issue about
 * the whole value names `root` (`body`, `payload`, `query`).
 */
export const firstIssue = (error: z.ZodError, root: string): InvalidInput => {
  const { issue, path } = leaf(error.issues[0], [])
  const field = fieldName(path) || root
  return new InvalidInput({ field, message: `${field}: ${issue.message}` })
}

/** Parses `value` with `schema`: its output, or the first issue as `InvalidInput`. */
export const parseInput = <S extends z.ZodType>(schema: S, value: unknown, root: string): z.output<S> | InvalidInput => {
  const result = schema.safeParse(value, { error: inputErrorMap })
  return result.success ? result.data : firstIssue(result.error, root)
}

/** A number as JSON writes one. */
const NUMBER_TEXT = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Blob)

/**
 * A form-encoded body's values as the schema takes them (API-DECISIONS "Wire format": bodies are
 * also accepted form-encoded). A form carries only strings: where the schema wants a number or a
 * boolean and the string reads as one (`60`, `-40`, `1.5`, `true`), it becomes one. Anything else
 * is left as it came, for the schema to refuse naming the field; a union takes the first of its
 * options the converted value satisfies, and a string one of them accepts stays a string.
 */
export const formValues = (schema: z.core.$ZodType, value: unknown): unknown => {
  if (
    schema instanceof z.ZodOptional || schema instanceof z.ZodNullable || schema instanceof z.ZodDefault ||
    schema instanceof z.ZodPrefault || schema instanceof z.ZodReadonly || schema instanceof z.ZodCatch
  ) {
    return formValues(schema.unwrap(), value)
  }
  if (schema instanceof z.ZodPipe) return formValues(schema.in, value)
  if (schema instanceof z.ZodUnion) {
    const options: ReadonlyArray<z.core.$ZodType> = schema.options
    if (typeof value === "string" && options.some((option) => z.safeParse(option, value).success)) return value
    for (const option of options) {
      const converted = formValues(option, value)
      if (converted !== value && z.safeParse(option, converted).success) return converted
    }
    return value
  }
  if (typeof value === "string") {
    if (schema instanceof z.ZodNumber && NUMBER_TEXT.test(value) && Number.isFinite(Number(value))) return Number(value)
    if (schema instanceof z.ZodBoolean && (value === "true" || value === "false")) return value === "true"
    return value
  }
  if (schema instanceof z.ZodObject && isRecord(value)) {
    const shape: Record<string, z.core.$ZodType> = schema.shape
    const out: Record<string, unknown> = {}
    for (const [key, field] of Object.entries(value)) out[key] = Object.hasOwn(shape, key) ? formValues(shape[key], field) : field
    return out
  }
  if (schema instanceof z.ZodArray && Array.isArray(value)) return value.map((item) => formValues(schema.element, item))
  return value
}
