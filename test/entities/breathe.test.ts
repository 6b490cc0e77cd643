import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { eachBreathing } from "../../src/entities/breathe.ts"

/** Synchronous work of about `ms`, as a thousand actors' steps are. */
const busy = (ms: number) => {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // spinning
  }
}

describe("breathing through long synchronous work", () => {
  it("lets timers and I/O run between the chunks of many fibers woken together", async () => {
    const FIBERS = 8
    const ITEMS = 40
    let done = 0
    // Set before the work starts: without breathing it would fire only after all of it (~320 ms).
    let doneWhenTimerFired = -1
    const timer = new Promise<void>((resolve) =>
      setTimeout(() => {
        doneWhenTimerFired = done
        resolve()
      }, 0)
    )
    const work = Effect.forEach(
      Array.from({ length: FIBERS }, (_, i) => i),
      () => eachBreathing(Array.from({ length: ITEMS }, (_, i) => i), () => {
        busy(1)
        done++
      }, 4),
      { concurrency: "unbounded", discard: true }
    )
    await Effect.runPromise(work)
    await timer
    expect(done).toBe(FIBERS * ITEMS)
    // The timer ran within the first slices (10 ms each), long before the last item.
    expect(doneWhenTimerFired).toBeGreaterThanOrEqual(0)
    expect(doneWhenTimerFired).toBeLessThan((FIBERS * ITEMS) / 2)
  })

  it("does every item, in order, when the work is short", async () => {
    const seen: Array<number> = []
    await Effect.runPromise(eachBreathing([1, 2, 3, 4, 5], (i) => void seen.push(i), 2))
    expect(seen).toEqual([1, 2, 3, 4, 5])
  })
})
