import { Cause, Logger, References } from "effect"

/**
 * `LOG_FORMAT=json`: one JSON object per line, for log collectors (Loki, Elasticsearch, journald
 * with a JSON parser). Its fields: `time` (ISO 8601), `level` (lower case), `message` (the text
 * parts of the log call), then the log's annotations at the top level (`requestId`, `route`,
 * `principal`, `deviceId` where the line is about a request or a device), then the fields of an
 * object logged beside the text (`Effect.logInfo("e-mail sent", { alert, recipients })`), and
 * `cause` for a failure or defect, rendered as `Cause.pretty` does (with its stack).
 */
export const jsonLogger = Logger.make<unknown, string>(({ cause, date, fiber, logLevel, message }) => {
  const text: Array<string> = []
  const fields: Record<string, unknown> = {}
  for (const part of Array.isArray(message) ? message : [message]) {
    if (typeof part === "string") text.push(part)
    else if (part instanceof Error) fields.error = part.message
    else if (typeof part === "object" && part !== null && Object.getPrototypeOf(part) === Object.prototype) Object.assign(fields, part)
    else text.push(String(part))
  }
  const line: Record<string, unknown> = { time: date.toISOString(), level: logLevel.toLowerCase(), message: text.join(" ") }
  Object.assign(line, fiber.getRef(References.CurrentLogAnnotations), fields)
  if (cause.reasons.length > 0) line.cause = Cause.pretty(cause)
  return JSON.stringify(line, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value))
})

/** The loggers of `LOG_FORMAT`: json, or Effect's default text logger. */
export const loggersFor = (format: "text" | "json") =>
  format === "json" ? [Logger.withConsoleLog(jsonLogger)] : [Logger.defaultLogger]
