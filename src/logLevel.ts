import { Effect, type LogLevel, References } from "effect"
import { AppConfig, type LogLevelName } from "./config.ts"

/** `LOG_LEVEL` names → Effect's levels. */
export const logLevels: Record<LogLevelName, LogLevel.LogLevel> = {
  all: "All",
  trace: "Trace",
  debug: "Debug",
  info: "Info",
  warn: "Warn",
  error: "Error",
  fatal: "Fatal",
  none: "None"
}

/** Applies `LOG_LEVEL` to an effect (the entry point's own logs). */
export const withLogLevel = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(AppConfig, (config) => Effect.provideService(effect, References.MinimumLogLevel, logLevels[config.logLevel]))
