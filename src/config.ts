import { Config, ConfigProvider, Duration, Effect, Option, Redacted } from "effect"

/** A setting's value refused, with a message naming it. */
const invalid = (message: string) => new Config.ConfigError(new ConfigProvider.SourceError({ message }))

const isPort = (n: number) => Number.isInteger(n) && n >= 0 && n <= 65535

/** A TCP/UDP port; 0 asks the OS for a free one (tests and benchmarks). */
const port = (name: string, fallback: number) =>
  Config.Int(name).pipe(
    Config.mapEffect((n) =>
      isPort(n)
        ? Effect.succeed(n)
        : Effect.fail(invalid(`${name}: must be a port from 0 to 65535, got ${n}`))
    ),
    Config.withDefault(fallback)
  )

/** A listener's port, or `off`: that listener is not opened (null). */
const listenerPort = (name: string, fallback: number) =>
  Config.String(name).pipe(
    Config.mapEffect((text) => {
      if (text.trim().toLowerCase() === "off") return Effect.succeed<number | null>(null)
      const n = /^\s*\d+\s*$/.test(text) ? Number(text) : Number.NaN
      return isPort(n)
        ? Effect.succeed<number | null>(n)
        : Effect.fail(invalid(`${name}: must be a port from 0 to 65535, or off; got ${text}`))
    }),
    Config.withDefault<number | null>(fallback)
  )

/** Both or neither: the TLS listeners start when a certificate and its key are given. */
const tlsFiles = Config.all({
  cert: Config.String("TLS_CERT_FILE").pipe(Config.option),
  key: Config.String("TLS_KEY_FILE").pipe(Config.option)
}).pipe(
  Config.mapEffect(({ cert, key }) => {
    if (Option.isSome(cert) && Option.isSome(key)) return Effect.succeed(Option.some({ certFile: cert.value, keyFile: key.value }))
    if (Option.isNone(cert) && Option.isNone(key)) return Effect.succeed(Option.none<{ certFile: string; keyFile: string }>())
    const missing = Option.isNone(cert) ? "TLS_CERT_FILE" : "TLS_KEY_FILE"
    const given = Option.isNone(cert) ? "TLS_KEY_FILE" : "TLS_CERT_FILE"
    return Effect.fail(invalid(`${missing}: must be set with ${given} (the TLS listeners need both)`))
  })
)

export const LogLevels = ["all", "trace", "debug", "info", "warn", "error", "fatal", "none"] as const
export type LogLevelName = (typeof LogLevels)[number]

/** Every setting of the configuration table in ARCHITECTURE.md. */
export const AppConfig = Config.all({
  port: listenerPort("PORT", 8080),
  mqttPort: listenerPort("MQTT_PORT", 1883),
  mqttWsPort: listenerPort("MQTT_WS_PORT", 3000),
  /** The TLS listeners, opened when `tls` is set (a certificate and its key, PEM files). */
  httpsPort: listenerPort("HTTPS_PORT", 8443),
  mqttsPort: listenerPort("MQTTS_PORT", 8883),
  mqttWssPort: listenerPort("MQTT_WSS_PORT", 8884),
  tls: tlsFiles,
  coapPort: port("COAP_PORT", 5683),
  host: Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
  dataDir: Config.String("DATA_DIR").pipe(Config.withDefault("./data")),
  databaseUrl: Config.Redacted("DATABASE_URL").pipe(Config.option),
  natsUrl: Config.String("NATS_URL").pipe(Config.option),
  bootstrapAppKey: Config.Redacted("BOOTSTRAP_APP_KEY").pipe(
    Config.mapEffect((key) =>
      Redacted.value(key).startsWith("a_sk_")
        ? Effect.succeed(key)
        : Effect.fail(invalid("BOOTSTRAP_APP_KEY: must start with a_sk_"))
    ),
    Config.option
  ),
  adminEmail: Config.String("ADMIN_EMAIL").pipe(Config.option),
  adminPassword: Config.Redacted("ADMIN_PASSWORD").pipe(Config.option),
  /** The host other processes reach this one at (cluster runner calls, Postgres only). */
  clusterHost: Config.String("CLUSTER_HOST").pipe(Config.option),
  logLevel: Config.Literals(LogLevels, "LOG_LEVEL").pipe(Config.withDefault("info" as LogLevelName)),
  /** `json`: one JSON object per line (`src/logFormat.ts`); `text`: Effect's default lines. */
  logFormat: Config.Literals(["text", "json"], "LOG_FORMAT").pipe(Config.withDefault("text" as const)),
  /** `off`: nothing is recorded and `GET /metrics` is not served. */
  metrics: Config.Literals(["on", "off"], "METRICS").pipe(Config.withDefault("on" as const)),
  /** When set, `GET /metrics` answers only `Authorization: Bearer <METRICS_TOKEN>`. */
  metricsToken: Config.Redacted("METRICS_TOKEN").pipe(Config.option),
  /** How often each process reads the store's credential-change counter (`CredentialWatch`). */
  credentialCheckInterval: Config.Duration("CREDENTIAL_CHECK_INTERVAL").pipe(
    Config.mapEffect((every) =>
      Duration.isGreaterThanOrEqualTo(every, Duration.millis(10))
        ? Effect.succeed(every)
        : Effect.fail(
          invalid("CREDENTIAL_CHECK_INTERVAL: must be at least 10 millis")
        )
    ),
    Config.withDefault(Duration.seconds(1))
  )
})

export type AppConfig = Config.Success<typeof AppConfig>

export interface Listener {
  readonly setting: string
  readonly port: number
  readonly protocol: "tcp" | "udp"
}

/** The listeners a start would open: the TLS ones only with a certificate, none set to `off`. */
export const enabledListeners = (config: AppConfig): Array<Listener> => {
  const tls = Option.isSome(config.tls)
  const all: Array<[string, number | null, "tcp" | "udp", boolean]> = [
    ["PORT", config.port, "tcp", true],
    ["MQTT_PORT", config.mqttPort, "tcp", true],
    ["MQTT_WS_PORT", config.mqttWsPort, "tcp", true],
    ["COAP_PORT", config.coapPort, "udp", true],
    ["HTTPS_PORT", config.httpsPort, "tcp", tls],
    ["MQTTS_PORT", config.mqttsPort, "tcp", tls],
    ["MQTT_WSS_PORT", config.mqttWssPort, "tcp", tls]
  ]
  return all.flatMap(([setting, port, protocol, on]) => (on && port !== null ? [{ setting, port, protocol }] : []))
}

/**
 * Two listeners given one port (0 aside: the system picks each its own), each after the first
 * with the setting it clashes with: `{ setting: "MQTT_PORT", message: "8080 is PORT's port too…" }`.
 */
export const portClashes = (config: AppConfig): Array<{ readonly setting: string; readonly message: string }> => {
  const taken = new Map<string, string>()
  const clashes: Array<{ setting: string; message: string }> = []
  for (const { setting, port, protocol } of enabledListeners(config)) {
    if (port === 0) continue
    const twin = taken.get(`${protocol}:${port}`)
    if (twin !== undefined) clashes.push({ setting, message: `${port} is ${twin}'s port too: give each listener its own` })
    else taken.set(`${protocol}:${port}`, setting)
  }
  return clashes
}

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
