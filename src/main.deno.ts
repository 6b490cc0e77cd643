import { Layer } from "effect"
import { DenoHttpListener } from "./adapters/http/denoListener.ts"
import { AppLive } from "./app.ts"
import { launch } from "./launch.ts"

/** The part of the `Deno` global used here, typed without Deno's own declarations. */
interface DenoProcessApi {
  addSignalListener(signal: "SIGINT" | "SIGTERM", handler: () => void): void
  exit(code: number): never
}

const deno = (globalThis as unknown as { Deno: DenoProcessApi }).Deno

launch(AppLive.pipe(Layer.provide(DenoHttpListener)), {
  onShutdownSignal: (handler) => {
    // Like `process.once` on Node: the first signal shuts down, a second one ends the
    // process at once (128 + signal number) rather than wait for a stuck shutdown.
    let signalled = false
    const on = (signal: "SIGINT" | "SIGTERM", code: number) =>
      deno.addSignalListener(signal, () => {
        if (signalled) deno.exit(code)
        signalled = true
        handler()
      })
    on("SIGINT", 130)
    on("SIGTERM", 143)
  },
  exit: (code) => deno.exit(code)
})
