import "./quietDebug.ts"
import { launch } from "./launch.ts"
import { nodeHooks } from "./nodeProcess.ts"
import { NodeAppLive } from "./nodeServer.ts"

launch(NodeAppLive, nodeHooks)
