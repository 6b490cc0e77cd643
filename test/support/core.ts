import { ConfigProvider, Context, Effect, Exit, Layer, Scope } from "effect"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { HttpLive, HttpPort } from "../../src/adapters/http/HttpServer.ts"
import { NodeHttpListener } from "../../src/adapters/http/nodeListener.ts"
import { CoreLive } from "../../src/app.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, type TestResponse } from "./app.ts"
import { createPostgresDatabase, type StoreKind, type TestDatabase } from "./databases.ts"

/**
 * The core (store, bus, cluster with its entities) of one process, with its full
 * context for effects run against it (`run`): entity clients, the bus, the store. With
 * `listen`, REST and the cluster's runner endpoint are served on a real port (0), so two of
 * these on one Postgres database are two runners that call each other over HTTP.
 */
const coreLayer = CoreLive
const listeningLayer = HttpLive.pipe(Layer.provideMerge(CoreLive), Layer.provideMerge(HttpPort.layer), Layer.provide(NodeHttpListener))

export type CoreServices = Layer.Success<typeof coreLayer>

export interface TestCore {
  readonly context: Context.Context<CoreServices>
  /** The database URL (Postgres), for a second process on the same store. */
  readonly database: string
  /** The REST and runner port, when listening. */
  readonly port: number | undefined
  run<A, E>(effect: Effect.Effect<A, E, CoreServices>): Promise<A>
  /** `app.request` under `/v1`, JSON in and out, with the bootstrap key unless another (or null: none) is given. */
  call(method: string, path: string, body?: unknown, key?: string | null, headers?: Record<string, string>): Promise<TestResponse>
  close(): Promise<void>
}

export const startCore = async (
  store: StoreKind | { readonly database: string },
  options: { readonly listen?: boolean; readonly env?: Record<string, string> } = {}
): Promise<TestCore> => {
  let db: TestDatabase | undefined
  if (store === "postgres") db = await createPostgresDatabase()
  const database = typeof store === "object" ? store.database : db?.url ?? "memory://"
  const provider = ConfigProvider.layer(ConfigProvider.fromEnvRecord({
    DATABASE_URL: database,
    BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    LOG_LEVEL: "error",
    HOST: "127.0.0.1",
    CLUSTER_HOST: "127.0.0.1",
    PORT: "0",
    ...options.env
  }))
  const scope = await Effect.runPromise(Scope.make())
  let context: Context.Context<CoreServices>
  let port: number | undefined
  try {
    if (options.listen === true) {
      const built = await Effect.runPromise(Layer.buildWithScope(listeningLayer.pipe(Layer.provide(provider)), scope))
      context = built
      port = Context.get(built, HttpPort).port ?? undefined
    } else {
      context = await Effect.runPromise(Layer.buildWithScope(coreLayer.pipe(Layer.provide(provider)), scope))
    }
  } catch (error) {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await db?.drop()
    throw error
  }
  const app = await Effect.runPromise(Effect.provideContext(makeHttpApp, context))
  const call: TestCore["call"] = async (method, path, body, key = BOOTSTRAP_KEY, extra = {}) => {
    const headers: Record<string, string> = { ...extra }
    if (key !== null) headers.authorization = `Bearer ${key}`
    if (body !== undefined) headers["content-type"] = "application/json"
    const res = await app.request(`/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, headers: res.headers, body: text === "" ? undefined : JSON.parse(text) }
  }
  return {
    context,
    database,
    port,
    run: (effect) => Effect.runPromise(Effect.provideContext(effect, context)),
    call,
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await db?.drop()
    }
  }
}
