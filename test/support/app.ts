import { ConfigProvider, Context, Effect, Exit, Layer, Scope } from "effect"
import type { OpenAPIHono } from "@hono/zod-openapi"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { CoreLive } from "../../src/app.ts"
import { HttpLive, HttpPort } from "../../src/adapters/http/HttpServer.ts"
import { NodeHttpListener } from "../../src/adapters/http/nodeListener.ts"
import type { HttpServices } from "../../src/adapters/http/route.ts"
import { createPostgresDatabase, type StoreKind, type TestDatabase } from "./databases.ts"

export const BOOTSTRAP_KEY = "a_sk_test_bootstrap_key_0123456789"
export const ADMIN_EMAIL = "owner@example.com"
export const ADMIN_PASSWORD = "correct horse battery"

export interface TestApp {
  readonly app: OpenAPIHono
  readonly context: Context.Context<HttpServices>
  /** `app.request` under `/v1`, JSON in and out. */
  call(method: string, path: string, options?: { key?: string | undefined; body?: unknown; headers?: Record<string, string> }): Promise<TestResponse>
  close(): Promise<void>
}

export interface TestResponse {
  readonly status: number
  readonly headers: Headers
  // Test code reads arbitrary JSON shapes.
  readonly body: any
}

/**
 * The core with REST served on a real port (0) on 127.0.0.1: on Postgres, the cluster's runner
 * endpoint is on that port, so several of these on one database are runners that reach each other.
 */
const listening = HttpLive.pipe(Layer.provideMerge(CoreLive), Layer.provideMerge(HttpPort.layer), Layer.provide(NodeHttpListener))

/**
 * Builds the core layers with the given environment and returns the Hono app (no sockets, unless
 * `listen`: then REST, and the cluster's runner endpoint, listen on a port of 127.0.0.1).
 */
export const startApp = async (env: Record<string, string>, options: { readonly listen?: boolean } = {}): Promise<TestApp> => {
  const scope = await Effect.runPromise(Scope.make())
  const provider = ConfigProvider.fromEnvRecord({
    BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    // Refusals are logged as warnings, and these tests make hundreds on purpose.
    LOG_LEVEL: "error",
    ...(options.listen === true ? { HOST: "127.0.0.1", CLUSTER_HOST: "127.0.0.1", PORT: "0" } : {}),
    ...env
  })
  const layer = options.listen === true ? listening : CoreLive
  const context: Context.Context<HttpServices> = await Effect.runPromise(
    Layer.buildWithScope(layer.pipe(Layer.provide(ConfigProvider.layer(provider))), scope)
  )
  const app = await Effect.runPromise(Effect.provideContext(makeHttpApp, context))
  const call: TestApp["call"] = async (method, path, options = {}) => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.key !== undefined) headers.authorization = `Bearer ${options.key}`
    let body: string | undefined
    if (options.body !== undefined) {
      body = typeof options.body === "string" ? options.body : JSON.stringify(options.body)
      headers["content-type"] ??= "application/json"
    }
    const res = await app.request(`/v1${path}`, { method, headers, body })
    const text = await res.text()
    let parsed: unknown = text
    try {
      parsed = text === "" ? undefined : JSON.parse(text)
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, headers: res.headers, body: parsed }
  }
  return { app, context, call, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

/** A test app on a fresh store of the given kind; `close` also drops a Postgres database. */
export const startAppOn = async (kind: StoreKind, env: Record<string, string> = {}): Promise<TestApp> => {
  let db: TestDatabase | undefined
  if (kind === "postgres") db = await createPostgresDatabase()
  const app = await startApp({ DATABASE_URL: db?.url ?? "memory://", ...env })
  return {
    ...app,
    close: async () => {
      await app.close()
      await db?.drop()
    }
  }
}
