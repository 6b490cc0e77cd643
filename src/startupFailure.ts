import { Cause } from "effect"
import { ListenersFailed } from "./adapters/http/HttpListener.ts"

/**
 * One line naming the setting for the failures an operator can fix (bad variable, port in
 * use, unreachable database); anything else is a defect and keeps its full cause.
 */
export const describeStartupFailure = (cause: Cause.Cause<unknown>): string => {
  const failure = cause.reasons.find(Cause.isFailReason)
  if (failure !== undefined) {
    const error = failure.error
    if (typeof error === "object" && error !== null && "_tag" in error) {
      if (error._tag === "ConfigError") return `invalid configuration: ${configMessage(error)}`
      // ListenFailed, StoreUnreachable, BusUnreachable, DataDirLocked: each names its setting.
      if ("setting" in error && "message" in error) return `${String(error.setting)}: ${String(error.message)}`
      if (error instanceof ListenersFailed) return error.line
    }
  }
  return Cause.pretty(cause)
}

const configMessage = (error: object): string => {
  const cause = "cause" in error ? error.cause : undefined
  const text = typeof cause === "object" && cause !== null && "message" in cause ? String(cause.message) : String(error)
  // "Expected …\n  at ["PORT"]" → "PORT: Expected …"
  const at = /\n\s*at \["([^"]+)"\]/.exec(text)
  return at ? `${at[1]}: ${text.slice(0, at.index).trim()}` : text
}
