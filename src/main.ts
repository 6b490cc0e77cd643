import { Layer } from "effect"
import { NodeHttpListener } from "./adapters/http/nodeListener.ts"
import { AppLive } from "./app.ts"
import { launch } from "./launch.ts"

launch(AppLive.pipe(Layer.provide(NodeHttpListener)), {
  onShutdownSignal: (handler) => {
    process.once("SIGINT", handler)
    process.once("SIGTERM", handler)
  },
  exit: (code) => process.exit(code)
})
