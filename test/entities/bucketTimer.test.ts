import { Effect, Exit, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { makeBucketTimer } from "../../src/entities/bucketTimer.ts"

/** A timer whose ticks are recorded; they fail while `refuse` is set. */
const recorded = async () => {
  const scope = await Effect.runPromise(Scope.make())
  const ticked: Array<number> = []
  const state = { refuse: false }
  const timer = makeBucketTimer({
    tick: (at) => (state.refuse ? Effect.fail("not delivered") : Effect.sync(() => void ticked.push(at))),
    scope
  })
  const settle = () => new Promise((r) => setTimeout(r, 20))
  return { timer, ticked, state, settle, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

describe("a device bucket's own timer", () => {
  it("is set once for the earliest deadline, and again for a later one after a tick was not delivered", async () => {
    const t = await recorded()
    const past = Date.now() - 1
    await Effect.runPromise(t.timer.arm(past))
    await Effect.runPromise(t.timer.arm(past + 1))
    await t.settle()
    expect(t.ticked).toEqual([past])
    t.timer.arrived(past)
    t.state.refuse = true
    await Effect.runPromise(t.timer.arm(past + 2))
    await t.settle()
    t.state.refuse = false
    await Effect.runPromise(t.timer.arm(past + 3))
    await t.settle()
    expect(t.ticked).toEqual([past, past + 3])
    await t.close()
  })

  it("fires at its deadline, not before, and ends with its scope", async () => {
    const t = await recorded()
    const soon = Date.now() + 150
    await Effect.runPromise(t.timer.arm(soon))
    await t.settle()
    expect(t.ticked).toEqual([])
    await new Promise((r) => setTimeout(r, 200))
    expect(t.ticked).toEqual([soon])
    t.timer.arrived(soon)
    await Effect.runPromise(t.timer.arm(Date.now() + 100))
    await t.close()
    await new Promise((r) => setTimeout(r, 150))
    expect(t.ticked).toEqual([soon])
  })
})
