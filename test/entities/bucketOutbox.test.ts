import { Deferred, Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { makeBucketOutbox } from "../../src/entities/bucketOutbox.ts"

/** An outbox whose lanes log what they perform; the first batch of rows waits for `release`. */
const logged = (options: { readonly failAlert?: string } = {}) =>
  Effect.gen(function*() {
    const log: Array<string> = []
    const release = yield* Deferred.make<void>()
    let held = false
    const outbox = yield* makeBucketOutbox<string, string>({
      what: "test",
      alerts: (alerts) =>
        alerts.includes(options.failAlert ?? "") ? Effect.die(new Error("boom")) : Effect.sync(() => void log.push(`alerts ${alerts.join("+")}`)),
      rows: (rows) =>
        Effect.gen(function*() {
          if (!held) {
            held = true
            yield* Deferred.await(release)
          }
          log.push(`rows ${rows.join("+")}`)
        })
    })
    return { outbox, log, release }
  })

const aMoment = Effect.promise(() => new Promise((r) => setTimeout(r, 20)))

describe("a device bucket's outbox", () => {
  it("applies a step's alerts before its rows, rows in step order, and later steps' alerts while earlier rows wait, merged", () =>
    Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const { outbox, log, release } = yield* logged()
      const first = yield* outbox.enqueue({ alerts: ["a1"], rows: "r1" })
      yield* aMoment
      // The first step's rows are held: the next steps' alerts go ahead, as one batch; their rows wait.
      const second = yield* outbox.enqueue({ alerts: ["a2"], rows: "r2" })
      const third = yield* outbox.enqueue({ alerts: ["a3", "a3b"], rows: "r3" })
      yield* aMoment
      expect(log).toEqual(["alerts a1", "alerts a2+a3+a3b"])
      expect(outbox.size()).toBe(3)
      expect(yield* Deferred.isDone(first)).toBe(false)
      yield* Deferred.succeed(release, undefined)
      yield* Deferred.await(third)
      expect(yield* Deferred.isDone(first)).toBe(true)
      expect(yield* Deferred.isDone(second)).toBe(true)
      expect(log).toEqual(["alerts a1", "alerts a2+a3+a3b", "rows r1", "rows r2+r3"])
      expect(outbox.size()).toBe(0)
    }))))

  it("a step without alerts goes straight to the rows lane, behind the steps before it", () =>
    Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const { outbox, log, release } = yield* logged()
      yield* Deferred.succeed(release, undefined)
      yield* outbox.enqueue({ alerts: ["a1"], rows: "r1" })
      const last = yield* outbox.enqueue({ alerts: [], rows: "r2" })
      yield* Deferred.await(last)
      expect(log.filter((l) => l.startsWith("rows")).join(" ")).toMatch(/^rows r1( rows r2|\+r2)$/)
      expect(log[0]).toBe("alerts a1")
    }))))

  it("skips the rows of steps whose alerts died, tells their waiters, and goes on with the next steps", () =>
    Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const { outbox, log, release } = yield* logged({ failAlert: "bad" })
      yield* Deferred.succeed(release, undefined)
      const failed = yield* outbox.enqueue({ alerts: ["bad"], rows: "r1" })
      expect(Exit.isFailure(yield* Effect.exit(Deferred.await(failed)))).toBe(true)
      const next = yield* outbox.enqueue({ alerts: ["a2"], rows: "r2" })
      yield* Deferred.await(next)
      expect(log).toEqual(["alerts a2", "rows r2"])
      expect(outbox.size()).toBe(0)
    }))))
})
