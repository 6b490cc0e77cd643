import type { RuntimeHooks } from "./launch.ts"

/**
 * Node's process: the first SIGINT or SIGTERM shuts down (drains, closes the listeners); a
 * second one gets Node's default and ends the process at once, rather than wait for a stuck
 * shutdown. Shared by `src/main.ts` and the command-line tool. A clean end leaves the code to
 * `process.exitCode`, which a command stopped half-way sets (130, as a shell reports SIGINT).
 */
export const nodeHooks: RuntimeHooks = {
  onShutdownSignal: (handler) => {
    process.once("SIGINT", handler)
    process.once("SIGTERM", handler)
  },
  exit: (code) => (code === 0 ? process.exit() : process.exit(code))
}
