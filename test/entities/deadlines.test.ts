import { describe, expect, it } from "vitest"
import { makeDeadlines } from "../../src/entities/deadlines.ts"

interface T {
  readonly id: number
  readonly deadline: number
}

/** A deterministic shuffle (xorshift), so a failure replays. */
const random = (seed: number) => () => {
  seed ^= seed << 13
  seed ^= seed >>> 17
  seed ^= seed << 5
  return (seed >>> 0) / 2 ** 32
}

describe("a bucket's deadlines, earliest first", () => {
  it("answers the earliest current deadline and every current one due, as a pass over all of them would", () => {
    const next = random(7)
    const current = new Map<number, T>()
    const deadlines = makeDeadlines<T>((t) => current.get(t.id) === t, () => current.size)
    for (let step = 0; step < 20_000; step++) {
      const id = Math.floor(next() * 500)
      if (next() < 0.2) current.delete(id)
      else {
        const timer = { id, deadline: Math.floor(next() * 100_000) }
        current.set(id, timer)
        deadlines.add(timer)
      }
      if (step % 97 === 0) {
        const all = [...current.values()]
        const least = all.length === 0 ? undefined : Math.min(...all.map((t) => t.deadline))
        expect(deadlines.earliest()).toBe(least)
        const now = Math.floor(next() * 100_000)
        const due = deadlines.due(now).map((t) => t.id).sort((a, b) => a - b)
        expect(due).toEqual(all.filter((t) => t.deadline <= now).map((t) => t.id).sort((a, b) => a - b))
      }
    }
  })

  it("keeps no more than about twice the current timers, however often they are replaced", () => {
    const current = new Map<number, T>()
    const deadlines = makeDeadlines<T>((t) => current.get(t.id) === t, () => current.size)
    let largest = 0
    for (let round = 0; round < 1_000; round++) {
      for (let id = 0; id < 100; id++) {
        // Later each round: the replaced ones never reach the top on their own.
        const timer = { id, deadline: round * 1_000 + id }
        current.set(id, timer)
        deadlines.add(timer)
        largest = Math.max(largest, deadlines.size())
      }
    }
    expect(deadlines.due(Number.MAX_SAFE_INTEGER)).toHaveLength(100)
    expect(largest).toBeLessThanOrEqual(2 * 100 + 64 + 1)
    expect(deadlines.earliest()).toBe(999_000)
  })
})
