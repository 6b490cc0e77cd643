import { Cause, Effect, Layer, Logger, type LogLevel, References } from "effect"
import { loggersFor } from "./logFormat.ts"
import { CoapLive } from "./adapters/coap/CoapServer.ts"
import { HttpLive } from "./adapters/http/HttpServer.ts"
import { ListenersFailed } from "./adapters/http/HttpListener.ts"
import { ListenersLive } from "./adapters/Listeners.ts"
import { MqttLive } from "./adapters/mqtt/MqttServer.ts"
import { Auth } from "./auth/Auth.ts"
import { SignInGuard } from "./auth/SignInGuard.ts"
import { Bus } from "./bus/Bus.ts"
import { Activity } from "./ingest/Activity.ts"
import { Ingest } from "./ingest/Ingest.ts"
import { Writer } from "./store/Writer.ts"
import { DeviceReads } from "./store/DeviceReads.ts"
import { AppConfig, databaseTarget, type LogLevelName } from "./config.ts"
import { SetupLive } from "./store/setup.ts"
import { ClusterLive } from "./cluster/Cluster.ts"
import { EntitiesLive } from "./entities/index.ts"
import { Sql } from "./store/Sql.ts"

/** The store the configuration names. */
export const StoreLive = Layer.unwrap(Effect.map(AppConfig, (config) => Sql.layer(databaseTarget(config))))

const logLevels: Record<LogLevelName, LogLevel.LogLevel> = {
  all: "All",
  trace: "Trace",
  debug: "Debug",
  info: "Info",
  warn: "Warn",
  error: "Error",
  fatal: "Fatal",
  none: "None"
}

/** `LOG_LEVEL` as the minimum level of every log of the layers it is provided to. */
const LogLevelLive = Layer.unwrap(
  Effect.map(AppConfig, (config) => Layer.succeed(References.MinimumLogLevel, logLevels[config.logLevel]))
)

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

/** The migrated, bootstrapped store and the auth service on the given bus: what every adapter needs. */
export const coreOn = <E, R>(bus: Layer.Layer<Bus, E, R>) => Layer.mergeAll(
  // After the migrations: it reads the credential-change counter from the start.
  Auth.layer.pipe(Layer.provide(SetupLive)),
  SetupLive,
  Ingest.layer,
  SignInGuard.layer,
  DeviceReads.layer,
  // After the migrations: the runner endpoint's secret is a row of migration 0009.
  EntitiesLive.pipe(Layer.provideMerge(ClusterLive.pipe(Layer.provide(SetupLive))))
).pipe(
  Layer.provideMerge(Layer.mergeAll(Writer.layer, bus, Activity.layer)),
  Layer.provideMerge(StoreLive),
  Layer.provideMerge(LogLevelLive)
)

/** The core on the bus the configuration names. */
export const CoreLive = coreOn(Bus.layer)

/**
 * Everything but the runtime-specific listener, which the entry file provides. Every port is
 * bound first, then the core is built (store, migrations, first organisation), then each
 * adapter starts serving on its port.
 */
export const AppLive = Layer.mergeAll(HttpLive, MqttLive, CoapLive).pipe(
  Layer.provide(CoreLive),
  Layer.provide(ListenersLive)
)

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
