import { Layer } from "effect"
import { NodeHttpListener } from "./adapters/http/nodeListener.ts"
import { AppLive } from "./app.ts"

/** The application on Node's HTTP listener: what `src/main.ts` and `voltaic start` serve. */
export const NodeAppLive = AppLive.pipe(Layer.provide(NodeHttpListener))
