/** The latest instant a JavaScript Date holds, in epoch milliseconds. */
export const MAX_INSTANT = 8_640_000_000_000_000

const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/

/**
 * An instant as the wire carries it: integer epoch milliseconds (a number, or a string of
 * digits, which is what form fields and queries carry) or an ISO-8601 date or date-time.
 * Dates that do not exist (2026-02-30, hour 25) are refused rather than rolled over, as
 * `Date.parse` alone would. Undefined when the value is none of these.
 */
export const parseInstant = (value: unknown): number | undefined => {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 && value <= MAX_INSTANT ? value : undefined
  if (typeof value !== "string") return undefined
  if (/^\d+$/.test(value)) return parseInstant(Number(value))
  const parts = ISO.exec(value)
  if (parts === null) return undefined
  const [year, month, day, hour, minute, second] = parts.slice(1, 7).map((p) => Number(p ?? "0"))
  const calendar = new Date(Date.UTC(year, month - 1, day))
  if (calendar.getUTCFullYear() !== year || calendar.getUTCMonth() !== month - 1 || calendar.getUTCDate() !== day) return undefined
  if (hour > 23 || minute > 59 || second > 59) return undefined
  const ms = Date.parse(value)
  return Number.isNaN(ms) || ms < 0 || ms > MAX_INSTANT ? undefined : ms
}

/** What `parseInstant` accepts, for error messages. */
export const INSTANT_RULE = "must be epoch milliseconds or an ISO-8601 date-time"
