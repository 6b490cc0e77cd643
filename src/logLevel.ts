import { Effect, Logger, type LogLevel, References } from "effect"
import { loggersFor } from "./logFormat.ts"
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

/**
 * Applies `LOG_LEVEL` and `LOG_FORMAT` to an effect: the entry point's, so every log of the
 * application (whose layers it builds) goes at that level, in that format.
 */
export const withLogLevel = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(AppConfig, (config) =>
    effect.pipe(
      Effect.provideService(References.MinimumLogLevel, logLevels[config.logLevel]),
      Effect.provideService(Logger.CurrentLoggers, new Set(loggersFor(config.logFormat)))
    ))
