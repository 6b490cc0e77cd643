import { Layer } from "effect"
import { NodeHttpListener } from "./adapters/http/nodeListener.ts"
import { AppLive } from "./app.ts"
import type { RuntimeHooks } from "./launch.ts"

/** The application on Node's HTTP listener: what `src/main.ts` and `voltaic start` serve. */
export const NodeAppLive = AppLive.pipe(Layer.provide(NodeHttpListener))

/**
 * Node's process: the first SIGINT or SIGTERM shuts down (drains, closes the listeners); a
 * second one gets Node's default and ends the process at once, rather than wait for a stuck
 * shutdown.
 */
export const nodeHooks: RuntimeHooks = {
  onShutdownSignal: (handler) => {
    process.once("SIGINT", handler)
    process.once("SIGTERM", handler)
  },
  exit: (code) => process.exit(code)
}
