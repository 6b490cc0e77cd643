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
    // A listener replaces the default action for good, so a second signal exits at once
    // instead of waiting for a shutdown that may be stuck.
    let signalled = false
    const onSignal = () => {
      if (signalled) deno.exit(130)
      signalled = true
      handler()
    }
    deno.addSignalListener("SIGINT", onSignal)
    deno.addSignalListener("SIGTERM", onSignal)
  },
  exit: (code) => deno.exit(code)
})
