import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { coalesce, perClient } from "../../src/entities/coalesce.ts"

/** A statement that records each call it gets: its items, and answers one output per distinct item. */
const recording = (fail?: (items: ReadonlyArray<string>) => boolean) => {
  const calls: Array<ReadonlyArray<string>> = []
  const statement = coalesce({
    run: (items: ReadonlyArray<string>) =>
      Effect.suspend(() => {
        calls.push(items)
        if (fail?.(items) === true) return Effect.fail(new Error("statement refused"))
        return Effect.succeed([...new Set(items)].map((item) => ({ key: item, value: `row of ${item}` })))
      }),
    itemKey: (item) => item,
    outputKey: (row) => row.key
  })
  return { calls, statement }
}

describe("coalesce: one statement for the calls many entities make at once", () => {
  it("runs the calls of concurrent fibers as one statement, each caller getting the outputs of its own items", async () => {
    const { calls, statement } = recording()
    const answers = await Effect.runPromise(
      Effect.all([statement(["a", "b"]), statement(["c"]), statement(["b", "d"])], { concurrency: "unbounded" })
    )
    expect(calls).toHaveLength(1)
    expect([...calls[0]].sort()).toEqual(["a", "b", "b", "c", "d"])
    expect(answers.map((rows) => rows.map((r) => r.key).sort())).toEqual([["a", "b"], ["c"], ["b", "d"]])
  })

  it("runs calls apart in time as separate statements, and an empty call as none", async () => {
    const { calls, statement } = recording()
    expect(await Effect.runPromise(statement([]))).toEqual([])
    await Effect.runPromise(statement(["a"]))
    await Effect.runPromise(statement(["b"]))
    expect(calls).toEqual([["a"], ["b"]])
  })

  it("fails every caller of a statement that fails, and the next statement runs", async () => {
    const { calls, statement } = recording((items) => items.includes("bad"))
    const exits = await Effect.runPromise(
      Effect.all([Effect.exit(statement(["bad"])), Effect.exit(statement(["good"]))], { concurrency: "unbounded" })
    )
    expect(exits.every(Exit.isFailure)).toBe(true)
    expect(await Effect.runPromise(statement(["good"]))).toEqual([{ key: "good", value: "row of good" }])
    expect(calls).toHaveLength(2)
  })

  it("builds one coalesced statement per client", () => {
    let built = 0
    const of = perClient((_client: object) => ++built)
    const a = {}
    expect([of(a), of(a), of({})]).toEqual([1, 1, 2])
  })
})
