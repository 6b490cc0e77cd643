import { Effect, Layer, References } from "effect"
import { CoapLive } from "./adapters/coap/CoapServer.ts"
import { HttpLive } from "./adapters/http/HttpServer.ts"
import { ListenersLive } from "./adapters/Listeners.ts"
import { MqttLive } from "./adapters/mqtt/MqttServer.ts"
import { Auth } from "./auth/Auth.ts"
import { SignInGuard } from "./auth/SignInGuard.ts"
import { Bus } from "./bus/Bus.ts"
import { Activity } from "./ingest/Activity.ts"
import { Ingest } from "./ingest/Ingest.ts"
import { Writer } from "./store/Writer.ts"
import { DeviceReads } from "./store/DeviceReads.ts"
import { AppConfig, databaseTarget } from "./config.ts"
import { logLevels } from "./logLevel.ts"
import { SetupLive } from "./store/setup.ts"
import { ClusterLive } from "./cluster/Cluster.ts"
import { EntitiesLive } from "./entities/index.ts"
import { Sql } from "./store/Sql.ts"

/** The store the configuration names. */
export const StoreLive = Layer.unwrap(Effect.map(AppConfig, (config) => Sql.layer(databaseTarget(config))))

/** `LOG_LEVEL` as the minimum level of every log of the layers it is provided to. */
const LogLevelLive = Layer.unwrap(
  Effect.map(AppConfig, (config) => Layer.succeed(References.MinimumLogLevel, logLevels[config.logLevel]))
)

/** The migrated, bootstrapped store and the auth service on the given bus: what every adapter needs. */
export const coreOn = <E, R>(bus: Layer.Layer<Bus, E, R>) => Layer.mergeAll(
  // After the migrations: it reads the credential-change counter from the start.
  Auth.layer.pipe(Layer.provide(SetupLive)),
  SetupLive,
  Ingest.layer,
  SignInGuard.layer,
  // After the migrations: the runner endpoint's secret is a row of migration 0009.
  EntitiesLive.pipe(Layer.provideMerge(ClusterLive.pipe(Layer.provide(SetupLive))))
).pipe(
  // Below ingest and the device buckets: a device created by an ingest, or leaving a bucket's memory, drops cached reads.
  Layer.provideMerge(DeviceReads.layer),
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
