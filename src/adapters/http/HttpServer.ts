import { Context, Effect, Layer, Option, Result, type Scope } from "effect"
import { AppConfig } from "../../config.ts"
import { type Bound, bindGated, failWithAll } from "../listening.ts"
import { type TlsMaterial, tlsMaterial } from "../tls.ts"
import { makeHttpApp } from "./HttpApp.ts"
import { HttpListener, type ListenFailed } from "./HttpListener.ts"

type Fetch = (request: Request, env?: object) => Response | Promise<Response>

/** The HTTP ports as bound: plain (`PORT`) and TLS (`HTTPS_PORT`); null where that listener is off. */
export interface HttpPorts {
  readonly port: number | null
  readonly tlsPort: number | null
  /** Hands every bound port the Hono app. */
  open(fetch: Fetch): Effect.Effect<void, never, Scope.Scope>
}

/**
 * The HTTP ports, bound at start before anything else: `PORT` unless it is `off`, and
 * `HTTPS_PORT` when a certificate is given (`TLS_CERT_FILE`, `TLS_KEY_FILE`) and it is not `off`.
 */
export class HttpPort extends Context.Service<HttpPort, HttpPorts>()("voltaic/adapters/http/HttpPort") {
  static readonly layer = Layer.effect(
    HttpPort,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const listener = yield* HttpListener
      const tls = yield* tlsMaterial
      const bind = (port: number | null, setting: string, secure: TlsMaterial | undefined) =>
        port === null
          ? Effect.succeed(undefined)
          : bindGated<[Request, object?], Response, ListenFailed, never>((fetch) =>
            Effect.map(listener.serve(fetch, { port, host: config.host, setting, tls: secure }), (bound) => bound.port)
          )
      const bound = yield* Effect.all([
        bind(config.port, "PORT", undefined),
        Option.match(tls, { onNone: () => Effect.succeed(undefined), onSome: (material) => bind(config.httpsPort, "HTTPS_PORT", material) })
      ], { mode: "result" })
      const [plain, secure] = bound
      if (Result.isFailure(plain) || Result.isFailure(secure)) return yield* failWithAll(bound)
      const ports: ReadonlyArray<Bound<Fetch>> = [plain.success, secure.success].filter((b) => b !== undefined)
      return HttpPort.of({
        port: plain.success?.port ?? null,
        tlsPort: secure.success?.port ?? null,
        open: (fetch) => Effect.forEach(ports, (b) => b.open(fetch), { discard: true })
      })
    })
  )
}

/** REST under `/v1` on the ports `HttpPort` bound. */
export const HttpLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const app = yield* makeHttpApp
    const http = yield* HttpPort
    yield* http.open(app.fetch)
    if (http.port !== null) yield* Effect.logInfo(`http listening on ${config.host}:${http.port} (REST under /v1, reference at /docs, console at /)`)
    if (http.tlsPort !== null) yield* Effect.logInfo(`https listening on ${config.host}:${http.tlsPort} (REST under /v1, reference at /docs, console at /)`)
  })
)
