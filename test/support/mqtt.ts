import { ConfigProvider, Context, Effect, Exit, Layer, Logger, Option, Scope } from "effect"
import type { OpenAPIHono } from "@hono/zod-openapi"
import mqtt, { ErrorWithSubackPacket, type IClientOptions, type IPublishPacket, type MqttClient } from "mqtt"
import { Duplex } from "node:stream"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { HttpLive, HttpPort } from "../../src/adapters/http/HttpServer.ts"
import { NodeHttpListener } from "../../src/adapters/http/nodeListener.ts"
import { MqttBroker, type MqttBrokerService } from "../../src/adapters/mqtt/MqttBroker.ts"
import { MqttListeners, MqttLive, MqttServer, type MqttServerService } from "../../src/adapters/mqtt/MqttServer.ts"
import { coreOn } from "../../src/app.ts"
import { Bus } from "../../src/bus/Bus.ts"
import { Activity } from "../../src/ingest/Activity.ts"
import { Sql, type SqlClient } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, type TestResponse } from "./app.ts"
import { createPostgresDatabase, type StoreKind, type TestDatabase } from "./databases.ts"

/** Waits at most this long for anything MQTT in tests: failures fail fast. */
export const WAIT_MS = 5_000

export interface LogLine {
  readonly level: string
  readonly message: string
}

export interface MqttTestApp {
  readonly app: OpenAPIHono
  readonly broker: MqttBrokerService
  /** The store, for changes another process would make behind this one's caches. */
  readonly sql: SqlClient
  /** Where device activity goes (the actors); a test may subscribe to hold it back. */
  readonly activity: Context.Service.Shape<typeof Activity>
  /** Bound ports, when started with `listen`. */
  readonly server: MqttServerService | undefined
  /** The REST (and cluster runner) port, when started with `listen`. */
  readonly httpPort: number | undefined
  /** The HTTPS port, when the app listens with a certificate. */
  readonly httpsPort: number | undefined
  /** Every log line of the core and MQTT layers at or above `LOG_LEVEL` (default info: refusals are logged at info). */
  readonly logs: Array<LogLine>
  /** `app.request` under `/v1`, JSON in and out. */
  call(method: string, path: string, options?: { key?: string | undefined; body?: unknown; headers?: Record<string, string> }): Promise<TestResponse>
  /** An `mqtt` client on an in-memory duplex pair served by `broker.handle` (no socket). */
  connectInMemory(options?: IClientOptions): Promise<MqttClient>
  close(): Promise<void>
}

/** Two connected in-memory streams: what one writes the other reads; destroying one ends both. */
export const duplexPair = (): [Duplex, Duplex] => {
  const sides: Array<Duplex> = []
  const make = (other: () => Duplex) =>
    new Duplex({
      read() {},
      write(chunk, _encoding, callback) {
        other().push(chunk)
        callback()
      },
      final(callback) {
        other().push(null)
        callback()
      },
      destroy(error, callback) {
        other().destroy()
        callback(error)
      }
    })
  sides.push(make(() => sides[1]), make(() => sides[0]))
  return [sides[0], sides[1]]
}

/**
 * The core layers plus the MQTT broker (and, with `listen`, its TCP and WebSocket listeners on
 * port 0) on a fresh store of the given kind, or on `database` (a Postgres URL another app
 * made, left in place at `close`) or PGlite in `dataDir` (likewise), with the bus of the
 * configuration or `bus`.
 */
export const startMqttApp = async (
  kind: StoreKind | { readonly database: string } | { readonly dataDir: string },
  options: { listen?: boolean; env?: Record<string, string>; bus?: Layer.Layer<Bus> } = {}
): Promise<MqttTestApp> => {
  let db: TestDatabase | undefined
  if (kind === "postgres") db = await createPostgresDatabase()
  // Without DATABASE_URL the store is PGlite in DATA_DIR.
  const store = typeof kind === "object"
    ? "dataDir" in kind ? { DATA_DIR: kind.dataDir } : { DATABASE_URL: kind.database }
    : { DATABASE_URL: db?.url ?? "memory://" }
  const scope = await Effect.runPromise(Scope.make())
  const provider = ConfigProvider.fromEnvRecord({
    ...store,
    BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    LOG_LEVEL: "info",
    HOST: "127.0.0.1",
    MQTT_PORT: "0",
    MQTT_WS_PORT: "0",
    PORT: "0",
    CLUSTER_HOST: "127.0.0.1",
    ...options.env
  })
  const logs: Array<LogLine> = []
  const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
    const parts = Array.isArray(message) ? message : [message]
    logs.push({ level: logLevel, message: parts.map(String).join(" ") })
  })
  // With REST on a port too: on Postgres the cluster's runner endpoint is served there, so two
  // apps on one database are two runners that reach each other.
  const listening = Layer.merge(MqttLive.pipe(Layer.provide(MqttListeners.layer)), HttpLive).pipe(
    Layer.provideMerge(HttpPort.layer),
    Layer.provide(NodeHttpListener)
  )
  const adapter: Layer.Layer<MqttBroker, Layer.Error<typeof listening>, Layer.Services<typeof listening>> = options.listen === true
    ? listening
    : MqttBroker.layer
  const layer = adapter.pipe(
    Layer.provideMerge(coreOn(options.bus ?? Bus.layer)),
    Layer.provide(Logger.layer([capture])),
    Layer.provide(ConfigProvider.layer(provider))
  )
  let context: Context.Context<Layer.Success<typeof layer>>
  try {
    context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  } catch (error) {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await db?.drop()
    throw error
  }
  const app = await Effect.runPromise(Effect.provideContext(makeHttpApp, context))
  const broker = Context.get(context, MqttBroker)
  const clients = new Set<MqttClient>()

  const call: MqttTestApp["call"] = async (method, path, { key = BOOTSTRAP_KEY, body, headers: extra } = {}) => {
    const headers: Record<string, string> = { ...extra }
    if (key !== undefined) headers.authorization = `Bearer ${key}`
    if (body !== undefined) headers["content-type"] = "application/json"
    const res = await app.request(`/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, headers: res.headers, body: text === "" ? undefined : JSON.parse(text) }
  }

  const connectInMemory: MqttTestApp["connectInMemory"] = (clientOptions = {}) => {
    const client = new mqtt.MqttClient(() => {
      const [near, far] = duplexPair()
      broker.handle(far)
      return near
    }, { reconnectPeriod: 0, connectTimeout: WAIT_MS, protocolVersion: 4, ...clientOptions })
    clients.add(client)
    return connected(client)
  }

  return {
    app,
    broker,
    activity: Context.get(context, Activity),
    sql: Context.get(context, Sql),
    server: Option.getOrUndefined(Context.getOption(context, MqttServer)),
    httpPort: Option.getOrUndefined(Option.map(Context.getOption(context, HttpPort), (http) => http.port ?? undefined)),
    httpsPort: Option.getOrUndefined(Option.map(Context.getOption(context, HttpPort), (http) => http.tlsPort ?? undefined)),
    logs,
    call,
    connectInMemory,
    close: async () => {
      await Promise.all([...clients].map((client) => client.endAsync(true)))
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await db?.drop()
    }
  }
}

/** Resolves once the client's CONNACK arrived; rejects on a refusal or after `WAIT_MS`. */
export const connected = (client: MqttClient): Promise<MqttClient> =>
  within(
    new Promise<MqttClient>((resolve, reject) => {
      client.once("connect", () => resolve(client))
      client.once("error", reject)
      client.once("close", () => reject(new Error("closed before CONNACK")))
    }),
    `CONNACK`
  ).finally(() => client.removeAllListeners("error").on("error", () => {}))

/** Connects over a URL (`mqtt://`, `ws://`) without reconnecting. */
export const connectUrl = (url: string, options: IClientOptions = {}): Promise<MqttClient> =>
  connected(mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: WAIT_MS, protocolVersion: 4, ...options }))

/** Rejects when `promise` takes longer than `ms`, naming what was awaited. */
export const within = <A>(promise: Promise<A>, what: string, ms = WAIT_MS): Promise<A> => {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

export interface Received {
  readonly topic: string
  readonly qos: number
  // Test code reads arbitrary JSON shapes.
  readonly json: any
}

/**
 * The next message on `client` whose topic `matches`. Call before triggering the publish and
 * await after it, so the message cannot be missed.
 */
export const nextMessage = (
  client: MqttClient,
  matches: (topic: string) => boolean = () => true,
  what = "a message",
  ms = WAIT_MS
): Promise<Received> => {
  let listener: ((topic: string, payload: Buffer, packet: IPublishPacket) => void) | undefined
  return within(
    new Promise<Received>((resolve) => {
      listener = (topic, payload, packet) => {
        if (matches(topic)) resolve({ topic, qos: packet.qos, json: JSON.parse(payload.toString()) })
      }
      client.on("message", listener)
    }),
    what,
    ms
  ).finally(() => {
    if (listener) client.off("message", listener)
  })
}

/** Every message received on `client` from now on. */
export const collect = (client: MqttClient): Array<Received> => {
  const received: Array<Received> = []
  client.on("message", (topic, payload, packet) => received.push({ topic, qos: packet.qos, json: JSON.parse(payload.toString()) }))
  return received
}

/** Resolves once the connection of `client` is closed (by the server). */
export const closedBy = (client: MqttClient, ms = WAIT_MS): Promise<void> =>
  client.disconnected || (!client.connected && !client.reconnecting)
    ? Promise.resolve()
    : within(new Promise<void>((resolve) => client.once("close", () => resolve())), "the connection to close", ms)

/** Subscribes and returns the granted QoS per filter (128 = refused). */
export const subscribe = async (client: MqttClient, filters: string | Array<string>, qos: 0 | 1 | 2 = 1): Promise<Array<number>> => {
  try {
    const granted = await within(client.subscribeAsync(filters, { qos }), `SUBACK for ${String(filters)}`)
    return granted.map((g) => g.qos)
  } catch (error) {
    // mqtt.js rejects a SUBACK holding a failure; the packet still has every return code.
    if (error instanceof ErrorWithSubackPacket) return error.packet.granted.map((g) => (typeof g === "number" ? g : -1))
    throw error
  }
}

export interface Seeded {
  readonly spaceId: string
  readonly device: { readonly id: string; readonly key: string }
  readonly other: { readonly id: string; readonly key: string }
  /** A second organisation: its application key and one of its devices. */
  readonly tenant: { readonly appKey: string; readonly deviceId: string }
}

let tenants = 0

/** Two devices of the first organisation, and a second organisation with a device of its own. */
export const seed = async (t: Pick<MqttTestApp, "call">): Promise<Seeded> => {
  const expectOk = (res: TestResponse, what: string) => {
    if (res.status !== 200) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }
  const spaceId = expectOk(await t.call("POST", "/spaces", { body: { name: "Site" } }), "space").id
  const device = expectOk(await t.call("POST", "/devices", { body: { name: "Meter", space: { id: spaceId } } }), "device")
  const other = expectOk(await t.call("POST", "/devices", { body: { name: "Other", space: { id: spaceId } } }), "device")
  tenants += 1
  const tenant = expectOk(
    await t.call("POST", "/organisations", {
      body: { name: `Tenant ${tenants}`, owner: { emailAddress: `tenant${tenants}-${Date.now()}@example.com`, fullName: "T", password: "tenant password 1" } }
    }),
    "organisation"
  )
  const appKey: string = tenant.apiKey.secretKey
  const tenantSpace = expectOk(await t.call("POST", "/spaces", { key: appKey, body: { name: "Elsewhere" } }), "tenant space").id
  const tenantDevice = expectOk(await t.call("POST", "/devices", { key: appKey, body: { name: "Theirs", space: { id: tenantSpace } } }), "tenant device")
  return {
    spaceId,
    device: { id: device.id, key: device.secretKey },
    other: { id: other.id, key: other.secretKey },
    tenant: { appKey, deviceId: tenantDevice.id }
  }
}

/**
 * Binds the MQTT listeners alone for `env` (an idle broker behind them), as a start does, and
 * closes them again: the start-up's outcome, with the ports bound.
 */
export const bindMqttListeners = (env: Record<string, string>) =>
  Effect.runPromiseExit(
    Effect.scoped(
      Layer.build(MqttServer.layer.pipe(
        Layer.provide(MqttListeners.layer),
        Layer.provide(Layer.succeed(MqttBroker, MqttBroker.of({ handle: () => {} }))),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ HOST: "127.0.0.1", LOG_LEVEL: "none", ...env })))
      ))
    )
  )
