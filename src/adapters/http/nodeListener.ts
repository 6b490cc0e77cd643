import { serve } from "@hono/node-server"
import { Effect, Layer } from "effect"
import type { AddressInfo } from "node:net"
import { HttpListener, listenFailure } from "./HttpListener.ts"

/** `HttpListener` on Node's http module through `@hono/node-server`. */
export const NodeHttpListener = Layer.succeed(HttpListener, {
  serve: (fetch, options) =>
    Effect.acquireRelease(
      Effect.callback<{ server: ReturnType<typeof serve>; port: number }, ReturnType<typeof listenFailure>>((resume) => {
        const server = serve({ fetch, port: options.port, hostname: options.host }, (info: AddressInfo) => {
          server.off("error", onError)
          resume(Effect.succeed({ server, port: info.port }))
        })
        const onError = (err: unknown) => resume(Effect.fail(listenFailure(options, err)))
        server.once("error", onError)
      }),
      ({ server }) =>
        Effect.callback<void>((resume) => {
          if ("closeAllConnections" in server) server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    ).pipe(Effect.map(({ port }) => ({ port })))
})
