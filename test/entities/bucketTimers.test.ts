import { Effect, Exit, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { makeBucketTimers } from "../../src/entities/bucketTimers.ts"

/** Timers whose stored wake-ups and ticks are recorded; ticks fail while `refuse` is set. */
const recorded = async () => {
  const scope = await Effect.runPromise(Scope.make())
  const stored: Array<number> = []
  const ticked: Array<number> = []
  const state = { refuse: false }
  const timers = makeBucketTimers({
    store: (at) => Effect.sync(() => void stored.push(at)),
    tick: (at) => (state.refuse ? Effect.fail("not delivered") : Effect.sync(() => void ticked.push(at))),
    scope
  })
  const settle = () => new Promise((r) => setTimeout(r, 20))
  return { timers, stored, ticked, state, settle, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

describe("a device bucket's timers", () => {
  it("stores one wake-up per quantum, none while an earlier one is pending, and a new one once it arrived", async () => {
    const t = await recorded()
    const now = 1_000_000
    await Effect.runPromise(t.timers.cover(now + 5_030, now))
    await Effect.runPromise(t.timers.cover(now + 5_070, now))
    await Effect.runPromise(t.timers.cover(now + 9_000, now))
    expect(t.stored).toEqual([now + 5_100])
    t.timers.arrived(now + 5_100, true)
    await Effect.runPromise(t.timers.cover(now + 9_000, now + 5_100))
    // Never for a quantum already past.
    await Effect.runPromise(t.timers.cover(now, now + 10_000))
    expect(t.stored).toEqual([now + 5_100, now + 9_000])
    await t.close()
  })

  it("sets its own timer once for the earliest deadline, and again for a later one after a tick was not delivered", async () => {
    const t = await recorded()
    const past = Date.now() - 1
    await Effect.runPromise(t.timers.arm(past))
    await Effect.runPromise(t.timers.arm(past + 1))
    await t.settle()
    expect(t.ticked).toEqual([past])
    t.timers.arrived(past, false)
    t.state.refuse = true
    await Effect.runPromise(t.timers.arm(past + 2))
    await t.settle()
    t.state.refuse = false
    await Effect.runPromise(t.timers.arm(past + 3))
    await t.settle()
    expect(t.ticked).toEqual([past, past + 3])
    await t.close()
  })
})
