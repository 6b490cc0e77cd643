import { Context, Effect, Layer } from "effect"
import { AppConfig } from "../../config.ts"
import { type Bound, bindGated } from "../listening.ts"
import { makeHttpApp } from "./HttpApp.ts"
import { HttpListener, type ListenFailed } from "./HttpListener.ts"

type Fetch = (request: Request, env?: object) => Response | Promise<Response>

/** The HTTP port (`PORT`), bound at start before anything else; `open` hands it the Hono app. */
export class HttpPort extends Context.Service<HttpPort, Bound<Fetch>>()("voltaic/adapters/http/HttpPort") {
  static readonly layer = Layer.effect(
    HttpPort,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const listener = yield* HttpListener
      return yield* bindGated<[Request, object?], Response, ListenFailed, never>((fetch) =>
        Effect.map(listener.serve(fetch, { port: config.port, host: config.host, setting: "PORT" }), ({ port }) => port)
      )
    })
  )
}

/** REST under `/v1` on the port `HttpPort` bound. */
export const HttpLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const app = yield* makeHttpApp
    const http = yield* HttpPort
    yield* http.open(app.fetch)
    yield* Effect.logInfo(`http listening on ${config.host}:${http.port} (REST under /v1, reference at /docs)`)
  })
)
