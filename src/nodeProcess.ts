import type { RuntimeHooks } from "./launch.ts"

/**
 * Node's process: the first SIGINT or SIGTERM shuts down (drains, closes the listeners); a
 * second one gets Node's default and ends the process at once, rather than wait for a stuck
 * shutdown. Shared by `src/main.ts` and the command-line tool.
 */
export const nodeHooks: RuntimeHooks = {
  onShutdownSignal: (handler) => {
    process.once("SIGINT", handler)
    process.once("SIGTERM", handler)
  },
  exit: (code) => process.exit(code)
}
