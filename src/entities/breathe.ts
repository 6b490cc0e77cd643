import { Effect } from "effect"

/**
 * Long synchronous work shares the event loop. Every bucket of a process may wake at once (a
 * statement coalesced across buckets answers them all in one socket read; the buckets of a
 * collapsed shard lock rehydrate together), and each then steps a thousand or more XState
 * actors; Effect's scheduler runs the woken fibers back to back, so 64 buckets each restoring
 * 1,560 actors held the loop for 6–14 s in bench:actors (100,000 devices). Nothing else ran
 * meanwhile: no socket read, no timer, and the shard-lock refresh timed out, which released
 * every shard and started the rehydration again.
 *
 * `breathe` yields to the event loop (timers, sockets, then the fibers waiting) once the loop's
 * current turn has run SLICE_MS of such work, whichever fibers did it; loops call it between
 * small chunks (`eachBreathing`). The loop then stays blocked about SLICE_MS plus one chunk.
 */
const SLICE_MS = 10

let sliceStart = performance.now()
let marking = false
const mark = () => {
  marking = false
  sliceStart = performance.now()
}

const yieldToLoop = Effect.callback<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/** Yields to the event loop when this turn of it has run SLICE_MS of work already; else nothing. */
export const breathe: Effect.Effect<void> = Effect.suspend(() => {
  // The turn ends at the next check phase: the slice starts again there.
  if (!marking) {
    marking = true
    setImmediate(mark)
  }
  return performance.now() - sliceStart < SLICE_MS ? Effect.void : yieldToLoop
})

/** Calls `f` on each item, breathing every `chunk` items. */
export const eachBreathing = Effect.fnUntraced(function*<A>(items: Iterable<A>, f: (item: A) => void, chunk = 32): Effect.fn.Return<void> {
  let i = 0
  for (const item of items) {
    f(item)
    if (++i % chunk === 0) yield* breathe
  }
})
