import { Config, ConfigProvider, Duration, Effect, Option, Redacted } from "effect"

/** A TCP/UDP port; 0 asks the OS for a free one (tests and benchmarks). */
const port = (name: string, fallback: number) =>
  Config.Int(name).pipe(
    Config.mapEffect((n) =>
      n >= 0 && n <= 65535
        ? Effect.succeed(n)
        : Effect.fail(new Config.ConfigError(new ConfigProvider.SourceError({ message: `${name}: must be a port from 0 to 65535, got ${n}` })))
    ),
    Config.withDefault(fallback)
  )

export const LogLevels = ["all", "trace", "debug", "info", "warn", "error", "fatal", "none"] as const
export type LogLevelName = (typeof LogLevels)[number]

/** Every setting of the configuration table in ARCHITECTURE.md. */
export const AppConfig = Config.all({
  port: port("PORT", 8080),
  mqttPort: port("MQTT_PORT", 1883),
  mqttWsPort: port("MQTT_WS_PORT", 3000),
  coapPort: port("COAP_PORT", 5683),
  host: Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
  dataDir: Config.String("DATA_DIR").pipe(Config.withDefault("./data")),
  databaseUrl: Config.Redacted("DATABASE_URL").pipe(Config.option),
  natsUrl: Config.String("NATS_URL").pipe(Config.option),
  bootstrapAppKey: Config.Redacted("BOOTSTRAP_APP_KEY").pipe(
    Config.mapEffect((key) =>
      Redacted.value(key).startsWith("a_sk_")
        ? Effect.succeed(key)
        : Effect.fail(new Config.ConfigError(new ConfigProvider.SourceError({ message: "BOOTSTRAP_APP_KEY: must start with a_sk_" })))
    ),
    Config.option
  ),
  adminEmail: Config.String("ADMIN_EMAIL").pipe(Config.option),
  adminPassword: Config.Redacted("ADMIN_PASSWORD").pipe(Config.option),
  /** The host other processes reach this one at (cluster runner calls, Postgres only). */
  clusterHost: Config.String("CLUSTER_HOST").pipe(Config.option),
  logLevel: Config.Literals(LogLevels, "LOG_LEVEL").pipe(Config.withDefault("info" as LogLevelName)),
  /** How often each process reads the store's credential-change counter (`CredentialWatch`). */
  credentialCheckInterval: Config.Duration("CREDENTIAL_CHECK_INTERVAL").pipe(
    Config.mapEffect((every) =>
      Duration.isGreaterThanOrEqualTo(every, Duration.millis(10))
        ? Effect.succeed(every)
        : Effect.fail(
          new Config.ConfigError(new ConfigProvider.SourceError({ message: "CREDENTIAL_CHECK_INTERVAL: must be at least 10 millis" }))
        )
    ),
    Config.withDefault(Duration.seconds(1))
  )
})

export type AppConfig = Config.Success<typeof AppConfig>

export type DatabaseTarget =
  | { readonly _tag: "pglite"; readonly dataDir: string | undefined }
  | { readonly _tag: "postgres"; readonly url: Redacted.Redacted<string> }

/** `DATABASE_URL` unset → PGlite in `DATA_DIR`; `memory://` → in-memory PGlite; `postgres://…` → server. */
export const databaseTarget = (config: Pick<AppConfig, "databaseUrl" | "dataDir">): DatabaseTarget =>
  Option.match(config.databaseUrl, {
    onNone: () => ({ _tag: "pglite", dataDir: config.dataDir }),
    onSome: (url) => {
      const value = Redacted.value(url)
      if (value === "memory://") return { _tag: "pglite", dataDir: undefined }
      return { _tag: "postgres", url }
    }
  })
