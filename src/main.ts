import { launch } from "./launch.ts"
import { nodeHooks, NodeAppLive } from "./nodeServer.ts"

launch(NodeAppLive, nodeHooks)
