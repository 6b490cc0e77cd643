import { Context, Effect, Schema, type Scope } from "effect"

/** The chosen address failed: in use, not permitted, or not an address of this host. */
export class ListenFailed extends Schema.TaggedError<ListenFailed>()("ListenFailed", {
  setting: Schema.String,
  message: Schema.String
}) {}

/** Every listener that could not be bound, so one start-up message names them all. */
export class ListenersFailed extends Schema.TaggedError<ListenersFailed>()("ListenersFailed", {
  failures: Schema.Array(ListenFailed)
}) {
  /** `PORT: 0.0.0.0:8080 is already in use; MQTT_PORT: 0.0.0.0:1883 is already in use` */
  get line(): string {
    // Once each: the HTTPS and MQTT-over-TLS listeners both refuse a bad certificate.
    return [...new Set(this.failures.map((f) => `${f.setting}: ${f.message}`))].join("; ")
  }
}

export interface ListenOptions {
  readonly port: number
  readonly host: string
  /** The setting that chose the port, named in errors (`PORT`). */
  readonly setting: string
  /** Serve over TLS with this certificate and key (HTTPS). */
  readonly tls?: { readonly cert: string; readonly key: string } | undefined
}

/**
 * Serves a fetch handler on a port: the one runtime-specific piece of HTTP, provided by
 * the entry file (`@hono/node-server` on Node, `Deno.serve` on Deno). Closed with the scope.
 * Node passes its request objects as `env` (`{incoming, outgoing}`), which the body reader
 * uses for a GET body the fetch `Request` cannot carry; Deno passes `{remoteAddress}`.
 */
export class HttpListener extends Context.Service<HttpListener, {
  serve(
    fetch: (request: Request, env?: object) => Response | Promise<Response>,
    options: ListenOptions
  ): Effect.Effect<{ readonly port: number }, ListenFailed, Scope.Scope>
}>()("voltaic/adapters/http/HttpListener") {}

export const listenFailure = (options: ListenOptions, cause: unknown): ListenFailed => {
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : ""
  const reason = code === "EADDRINUSE"
    ? "is already in use"
    : code === "EACCES"
    ? "is not permitted"
    : code === "EADDRNOTAVAIL"
    ? "is not an address of this host"
    : `cannot be opened (${cause instanceof Error ? cause.message : String(cause)})`
  return new ListenFailed({ setting: options.setting, message: `${options.host}:${options.port} ${reason}` })
}
