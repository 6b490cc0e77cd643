import { Duration, Effect, Exit, Fiber, Schedule } from "effect"
import { TestClock } from "effect/testing"
import { describe, expect, it } from "vitest"
import { retryFailed } from "../../src/domain/retry.ts"

/** An effect failing with `errors` in turn, then succeeding with the attempt's number; `attempts` counts its runs. */
const scripted = (errors: ReadonlyArray<string>) => {
  const counter = { attempts: 0 }
  const effect = Effect.suspend(() => {
    counter.attempts += 1
    const error = errors[counter.attempts - 1]
    return error === undefined ? Effect.succeed(counter.attempts) : Effect.fail(error)
  })
  return { counter, effect }
}

const retryable = (error: string) => error === "behind"

describe("retryFailed: Effect.retry's attempts, its policy built only after a first failure it retries", () => {
  it("builds the policy only once a first attempt failed with an error it retries (Effect.retry builds it at every run)", async () => {
    let built = 0
    // A schedule that counts the times its step is made: what Effect.retry does before a first attempt.
    const counting = Schedule.fromStep(Effect.sync(() => {
      built += 1
      return (_now: number, input: string) => Effect.succeed<[string, Duration.Duration]>([input, Duration.zero])
    }))
    await Effect.runPromise(Effect.retry(scripted([]).effect, { schedule: counting, while: retryable }))
    expect(built).toBe(1)
    built = 0
    expect(await Effect.runPromise(retryFailed(scripted([]).effect, { schedule: counting, while: retryable }))).toBe(1)
    expect(await Effect.runPromiseExit(retryFailed(scripted(["refused"]).effect, { schedule: counting, while: retryable }))).toEqual(Exit.fail("refused"))
    expect(built).toBe(0)
    expect(await Effect.runPromise(retryFailed(scripted(["behind", "behind"]).effect, { schedule: counting, while: retryable }))).toBe(3)
    expect(built).toBe(1)
  })

  it("runs a succeeding effect once", async () => {
    const { counter, effect } = scripted([])
    expect(await Effect.runPromise(retryFailed(effect, { schedule: Schedule.recurs(3), while: retryable }))).toBe(1)
    expect(counter.attempts).toBe(1)
  })

  it("retries what `while` retries, as Effect.retry does, until a success", async () => {
    const { counter, effect } = scripted(["behind", "behind"])
    expect(await Effect.runPromise(retryFailed(effect, { schedule: Schedule.recurs(3), while: retryable }))).toBe(3)
    expect(counter.attempts).toBe(3)
  })

  it("fails at once with an error `while` does not retry, first or later", async () => {
    const first = scripted(["refused"])
    expect(await Effect.runPromiseExit(retryFailed(first.effect, { schedule: Schedule.recurs(3), while: retryable }))).toEqual(Exit.fail("refused"))
    expect(first.counter.attempts).toBe(1)
    const later = scripted(["behind", "refused", "behind"])
    expect(await Effect.runPromiseExit(retryFailed(later.effect, { schedule: Schedule.recurs(3), while: retryable }))).toEqual(Exit.fail("refused"))
    expect(later.counter.attempts).toBe(2)
  })

  it("gives up with the last error when the schedule ends: the first failure counts as the retry's first attempt", async () => {
    const { counter, effect } = scripted(["behind", "behind", "behind", "behind", "behind"])
    const ours = await Effect.runPromiseExit(retryFailed(effect, { schedule: Schedule.recurs(2), while: retryable }))
    const plain = scripted(["behind", "behind", "behind", "behind", "behind"])
    const theirs = await Effect.runPromiseExit(Effect.retry(plain.effect, { schedule: Schedule.recurs(2), while: retryable }))
    expect(ours).toEqual(Exit.fail("behind"))
    expect(ours).toEqual(theirs)
    expect(counter.attempts).toBe(3)
    expect(plain.counter.attempts).toBe(3)
  })

  it("waits the schedule's delays between attempts, the first after the first failure", async () => {
    const { counter, effect } = scripted(["behind", "behind"])
    await Effect.runPromise(Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(retryFailed(effect, { schedule: Schedule.spaced("1 second"), while: retryable }))
      yield* TestClock.adjust("999 millis")
      expect(counter.attempts).toBe(1)
      yield* TestClock.adjust("1 millis")
      expect(counter.attempts).toBe(2)
      yield* TestClock.adjust("1 second")
      expect(yield* Fiber.join(fiber)).toBe(3)
    }).pipe(Effect.provide(TestClock.layer())))
  })
})
