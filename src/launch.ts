import { Cause, Effect, Exit, Layer } from "effect"
import { describeStartupFailure, withLogLevel } from "./app.ts"

/** What an entry file supplies about its runtime. */
export interface RuntimeHooks {
  onShutdownSignal(handler: () => void): void
  exit(code: number): void
}

/**
 * Runs the application layer until a shutdown signal. A start-up failure prints one line
 * naming the setting to fix and exits 1.
 */
export const launch = <E>(layer: Layer.Layer<never, E, never>, hooks: RuntimeHooks): void => {
  const fiber = Effect.runFork(withLogLevel(Layer.launch(layer)))
  hooks.onShutdownSignal(() => fiber.interruptUnsafe())
  fiber.addObserver((exit) => {
    if (Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause)) {
      console.error(`voltaic: ${describeStartupFailure(exit.cause)}`)
      hooks.exit(1)
    } else {
      hooks.exit(0)
    }
  })
}
