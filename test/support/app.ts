import { ConfigProvider, Context, Effect, Exit, Layer, Scope } from "effect"
import type { OpenAPIHono } from "@hono/zod-openapi"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { CoreLive } from "../../src/app.ts"
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

/** Builds the core layers with the given environment and returns the Hono app (no sockets). */
export const startApp = async (env: Record<string, string>): Promise<TestApp> => {
  const scope = await Effect.runPromise(Scope.make())
  const provider = ConfigProvider.fromEnvRecord({
    BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    // Refusals are logged as warnings, and these tests make hundreds on purpose.
    LOG_LEVEL: "error",
    ...env
  })
  const context = await Effect.runPromise(
    Layer.buildWithScope(CoreLive.pipe(Layer.provide(ConfigProvider.layer(provider))), scope)
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
