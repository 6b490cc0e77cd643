import { Cause, Console, Logger, References } from "effect"
import { escapeControls, escapeControlsButLines } from "./adapters/logLine.ts"

/** A log call's parts: its text, and the fields of plain objects (and an Error's message) logged beside it. */
const partsOf = (message: unknown) => {
  const text: Array<string> = []
  const fields: Record<string, unknown> = {}
  for (const part of Array.isArray(message) ? message : [message]) {
    if (typeof part === "string") text.push(part)
    else if (part instanceof Error) fields.error = part.message
    else if (typeof part === "object" && part !== null && Object.getPrototypeOf(part) === Object.prototype) Object.assign(fields, part)
    else text.push(String(part))
  }
  return { text, fields }
}

/**
 * `LOG_FORMAT=json`: one JSON object per line, for log collectors (Loki, Elasticsearch, journald
 * with a JSON parser). Its fields: `time` (ISO 8601), `level` (lower case), `message` (the text
 * parts of the log call), then the log's annotations at the top level (`requestId`, `route`,
 * `principal`, `deviceId` where the line is about a request or a device), then the fields of an
 * object logged beside the text (`Effect.logInfo("e-mail sent", { alert, recipients })`), and
 * `cause` for a failure or defect, rendered as `Cause.pretty` does (with its stack).
 */
export const jsonLogger = Logger.make<unknown, string>(({ cause, date, fiber, logLevel, message }) => {
  const { text, fields } = partsOf(message)
  const line: Record<string, unknown> = { time: date.toISOString(), level: logLevel.toLowerCase(), message: text.join(" ") }
  Object.assign(line, fiber.getRef(References.CurrentLogAnnotations), fields)
  if (cause.reasons.length > 0) line.cause = Cause.pretty(cause)
  // JSON.stringify leaves C1 controls and U+2028 / U+2029 raw (inside strings, the only place
  // they can be): escaped, the object is the same and stays on one line for any reader.
  return escapeControls(JSON.stringify(line, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value)))
})

const two = (n: number) => String(n).padStart(2, "0")

/**
 * A field's value in the text format: bare when it is one plain word (no whitespace, which takes in
 * U+2028 / U+2029, no quote, `=` or control character), else as JSON (quoted, escaped).
 */
const fieldText = (value: unknown): string =>
  typeof value === "string" && /^[^\s"=\p{Cc}]+$/u.test(value)
    ? value
    : escapeControls(JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)) ?? "undefined")

/**
 * The text format: Effect's default line (`[12:00:00.000] INFO (#12): message`), with the
 * annotations and logged fields as ` key=value` on the same line (the default logger hands them
 * to `console.log` as an object, which prints over several lines once it has a few keys), and a
 * cause on the lines after. Warnings and errors go where the default logger sends them.
 *
 * The line is one line whatever a peer chose (an MQTT client id as an annotation, a key named in
 * a refusal): control characters and the line separators are escaped in the message and fields
 * (a field holding one is quoted), and in the cause all but its line feeds and tabs, its lines
 * indented.
 */
export const textLogger = Logger.make<unknown, void>(({ cause, date, fiber, logLevel, message }) => {
  const { text, fields } = partsOf(message)
  const all: Record<string, unknown> = { ...fiber.getRef(References.CurrentLogAnnotations), ...fields }
  const time = `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}.${String(date.getMilliseconds()).padStart(3, "0")}`
  let line = `[${time}] ${logLevel.toUpperCase()} (#${fiber.id}): ${escapeControls(text.join(" "))}`
  for (const [key, value] of Object.entries(all)) line += ` ${escapeControls(key)}=${fieldText(value)}`
  // Each of the cause's lines indented: a line that starts a log entry never starts with
  // whitespace, so a line break in a failure's message cannot pass for an entry of its own.
  if (cause.reasons.length > 0) line += `\n${escapeControlsButLines(Cause.pretty(cause)).replace(/^/gm, "  ")}`
  const console = fiber.getRef(Console.Console)
  if (fiber.getRef(Logger.LogToStderr)) console.error(line)
  else console.log(line)
})

/** The loggers of `LOG_FORMAT`. */
export const loggersFor = (format: "text" | "json") => (format === "json" ? [Logger.withConsoleLog(jsonLogger)] : [textLogger])
