import { Cause, Effect, Exit, Layer } from "effect"
import { withLogLevel } from "./logLevel.ts"
import { describeStartupFailure } from "./startupFailure.ts"

/** What an entry file supplies about its runtime. */
export interface RuntimeHooks {
  onShutdownSignal(handler: () => void): void
  exit(code: number): void
}

/**
 * Runs `program` to its end or until a shutdown signal interrupts it, then exits: 0 when it
 * succeeded or was interrupted, 1 when it failed, after printing `describe`'s line (none when
 * it returns undefined: the failure was shown already). The server and every command of the
 * command-line tool run through here, so a signal stops each the same way.
 */
export const run = <E>(
  program: Effect.Effect<unknown, E, never>,
  hooks: RuntimeHooks,
  describe: (cause: Cause.Cause<E>) => string | undefined = describeStartupFailure
): void => {
  const fiber = Effect.runFork(program)
  // The fiber may wait on nothing Node counts (a timer-less promise): keep the process alive for it.
  const keepAlive = setInterval(() => {}, 2 ** 31 - 1)
  hooks.onShutdownSignal(() => fiber.interruptUnsafe())
  fiber.addObserver((exit) => {
    clearInterval(keepAlive)
    if (Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause)) {
      const line = describe(exit.cause)
      if (line !== undefined) console.error(`voltaic: ${line}`)
      hooks.exit(1)
    } else {
      hooks.exit(0)
    }
  })
}

/** The application layer served until it is interrupted, with `LOG_LEVEL` applied. */
export const serve = <E>(layer: Layer.Layer<never, E, never>) => withLogLevel(Layer.launch(layer))

/**
 * Runs the application layer until a shutdown signal. A start-up failure prints one line
 * naming the setting to fix and exits 1.
 */
export const launch = <E>(layer: Layer.Layer<never, E, never>, hooks: RuntimeHooks): void => run(serve(layer), hooks)
