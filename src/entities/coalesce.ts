import { Effect, Exit, type Request, RequestResolver } from "effect"
import * as Req from "effect/Request"

/**
 * One statement for the calls many entities make at once. Each device bucket and alert bucket
 * steps on its own, and when thousands of them wake together (devices falling silent at once)
 * each step's few statements queue on the store's pool: per-statement cost, not rows, is the
 * limit. Calls of one statement made within WINDOW_MS of each other (across fibers) run as one
 * call with all their items, through Effect's `RequestResolver`; each caller gets the outputs
 * keyed like its own items, or the failure of the combined call (each retries on its own).
 */
const WINDOW_MS = 20
/** Items per combined call: a bound on the statement's size. */
const MAX_CALLS = 2048

/**
 * The window on the process's own timer, not Effect's `Clock`: a test that drives time with
 * `TestClock` would otherwise hold every statement until it moves the clock.
 */
const window = Effect.callback<void>((resume) => {
  const timer = setTimeout(() => resume(Effect.void), WINDOW_MS)
  return Effect.sync(() => clearTimeout(timer))
})

interface Call<I, O, E> extends Request.Request<ReadonlyArray<O>, E> {
  readonly items: ReadonlyArray<I>
}

export interface Coalesced<I, O, E> {
  (items: ReadonlyArray<I>): Effect.Effect<ReadonlyArray<O>, E>
}

export const coalesce = <I, O, E>(options: {
  /** The statement for all the items (never empty). */
  readonly run: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  /** Which outputs answer which items: outputs keyed like an item go back to its caller. */
  readonly itemKey: (item: I) => string
  readonly outputKey: (output: O) => string
}): Coalesced<I, O, E> => {
  const make = Req.of<Call<I, O, E>>()
  const resolver = RequestResolver.make<Call<I, O, E>>((entries) =>
    Effect.flatMap(Effect.exit(options.run(entries.flatMap((e) => e.request.items))), (exit) =>
      Effect.sync(() => {
        if (Exit.isFailure(exit)) {
          for (const entry of entries) entry.completeUnsafe(Exit.failCause(exit.cause))
          return
        }
        const byKey = new Map<string, Array<O>>()
        for (const output of exit.value) {
          const key = options.outputKey(output)
          const list = byKey.get(key)
          if (list === undefined) byKey.set(key, [output])
          else list.push(output)
        }
        for (const entry of entries) {
          const keys = new Set(entry.request.items.map(options.itemKey))
          entry.completeUnsafe(Exit.succeed([...keys].flatMap((k) => byKey.get(k) ?? [])))
        }
      }))
  ).pipe(RequestResolver.setDelayEffect(window), RequestResolver.batchN(MAX_CALLS))
  return (items) => (items.length > 0 ? Effect.request(make({ items }), resolver) : Effect.succeed([]))
}

/** One coalesced statement per store client (a process may hold more than one in tests). */
export const perClient = <C extends object, F>(build: (client: C) => F) => {
  const built = new WeakMap<C, F>()
  return (client: C): F => {
    let f = built.get(client)
    if (f === undefined) {
      f = build(client)
      built.set(client, f)
    }
    return f
  }
}
