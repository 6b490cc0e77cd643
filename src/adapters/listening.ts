import { Effect, Exit, Result, Scope } from "effect"
import { ListenFailed, ListenersFailed } from "./http/HttpListener.ts"

/**
 * A listener bound before the application can serve: start-up binds every port first, so a
 * port in use stops it before anything is created (issue 15), and the adapter opens it later.
 */
export interface Bound<Handler> {
  readonly port: number
  /**
   * Hands the listener its handler; what arrived before waits for it (an HTTP request, an
   * MQTT connection). The listener closes when the caller's scope closes, before the
   * services behind the handler do.
   */
  open(handler: Handler): Effect.Effect<void, never, Scope.Scope>
}

/**
 * Runs `bind` in a scope of its own, closed with the caller's scope or, earlier, with the
 * scope that runs `closeWithScope` (the adapter's): the listener then closes before the
 * services behind the adapter.
 */
export const bindOwn = Effect.fnUntraced(function*<A, E, S>(bind: Effect.Effect<A, E, S | Scope.Scope>) {
  const own = yield* Scope.fork(yield* Effect.scope)
  const value = yield* Scope.provide(own)(bind)
  return { value, closeWithScope: Effect.addFinalizer(() => Scope.close(own, Exit.void)) }
})

/**
 * Binds with a stand-in handler that calls the real one once it is opened. `bind` receives
 * the stand-in and resolves to the bound port.
 */
export const bindGated = Effect.fnUntraced(function*<A extends ReadonlyArray<unknown>, R, E, S>(
  bind: (handler: (...args: A) => R | Promise<R>) => Effect.Effect<number, E, S | Scope.Scope>
): Effect.fn.Return<Bound<(...args: A) => R | Promise<R>>, E, Exclude<S, Scope.Scope> | Scope.Scope> {
  type Handler = (...args: A) => R | Promise<R>
  let current: Handler | undefined
  let opened!: (handler: Handler) => void
  const ready = new Promise<Handler>((resolve) => (opened = resolve))
  const { value: port, closeWithScope } = yield* bindOwn(
    bind((...args) => (current !== undefined ? current(...args) : ready.then((h) => h(...args))))
  )
  return {
    port,
    open: (handler) =>
      Effect.andThen(
        closeWithScope,
        Effect.sync(() => {
          current = handler
          opened(handler)
        })
      )
  }
})

/**
 * Fails with every listen failure among `results` in one `ListenersFailed`, so a start reports
 * all its port clashes at once; any other failure (a malformed setting) is raised as it is.
 */
export const failWithAll = <E>(
  results: ReadonlyArray<Result.Result<unknown, E>>
): Effect.Effect<never, ListenersFailed | Exclude<E, ListenFailed | ListenersFailed>> => {
  const failures: Array<ListenFailed> = []
  for (const result of results) {
    if (Result.isSuccess(result)) continue
    const failure: unknown = result.failure
    if (failure instanceof ListenFailed) failures.push(failure)
    else if (failure instanceof ListenersFailed) failures.push(...failure.failures)
    else return Effect.fail(result.failure as Exclude<E, ListenFailed | ListenersFailed>)
  }
  return Effect.fail(new ListenersFailed({ failures }))
}
