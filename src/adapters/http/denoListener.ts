import { Effect, Layer } from "effect"
import { HttpListener, listenFailure } from "./HttpListener.ts"

type ErrorClass = abstract new(...args: never) => Error

/** The part of `Deno.serve` used here, typed without Deno's own declarations. */
interface DenoHttpServer {
  readonly addr: { readonly port: number }
  shutdown(): Promise<void>
}

interface DenoServeApi {
  serve(
    options: { port: number; hostname: string; onListen?: () => void; cert?: string; key?: string },
    handler: (request: Request, info: { readonly remoteAddr: { readonly hostname: string } }) => Response | Promise<Response>
  ): DenoHttpServer
  readonly errors: {
    readonly AddrInUse: ErrorClass
    readonly AddrNotAvailable: ErrorClass
    readonly PermissionDenied: ErrorClass
  }
}

/** Deno's bind errors under the Node codes `listenFailure` reads. */
const withNodeCode = (deno: DenoServeApi, cause: unknown): unknown =>
  cause instanceof deno.errors.AddrInUse
    ? { code: "EADDRINUSE" }
    : cause instanceof deno.errors.AddrNotAvailable
    ? { code: "EADDRNOTAVAIL" }
    : cause instanceof deno.errors.PermissionDenied
    ? { code: "EACCES" }
    : cause

/** `HttpListener` on `Deno.serve`; shutdown waits for requests in flight. */
export const DenoHttpListener = Layer.succeed(HttpListener, {
  serve: (fetch, options) =>
    Effect.acquireRelease(
      Effect.suspend(() => {
        const deno = (globalThis as unknown as { Deno: DenoServeApi }).Deno
        return Effect.try({
          // onListen replaces Deno's own "Listening on" line; the application logs its own.
          try: () => deno.serve({ port: options.port, hostname: options.host, onListen: () => {}, ...(options.tls ?? {}) }, (request, info) => fetch(request, { remoteAddress: info.remoteAddr.hostname })),
          catch: (cause) => listenFailure(options, withNodeCode(deno, cause))
        })
      }),
      (server) => Effect.promise(() => server.shutdown())
    ).pipe(Effect.map((server) => ({ port: server.addr.port })))
})
