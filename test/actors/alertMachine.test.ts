import { createActor } from "xstate"
import { describe, expect, it } from "vitest"
import { alertMachine } from "../../actors/alertMachine.ts"
import { evaluateThreshold, valueAt } from "../../actors/rules.ts"

const open = (at = 1_000) => createActor(alertMachine, { input: { at } }).start()

describe("alertMachine", () => {
  it("updates lastSeenAt on a repeat occurrence and keeps firstSeenAt", () => {
    const alert = open(1_000)
    alert.send({ type: "alert.repeated", at: 5_000 })
    expect(alert.getSnapshot().context).toMatchObject({ firstSeenAt: 1_000, lastSeenAt: 5_000 })
    expect(alert.getSnapshot().value).toBe("unresolved")
  })

  it("goes through acknowledgement to resolution", () => {
    const alert = open()
    alert.send({ type: "alert.acknowledged", at: 2_000 })
    expect(alert.getSnapshot().value).toBe("acknowledged")
    alert.send({ type: "alert.acknowledged", at: 3_000 })
    expect(alert.getSnapshot().context.acknowledgedAt).toBe(2_000)
    alert.send({ type: "alert.resolved", at: 4_000 })
    expect(alert.getSnapshot().value).toBe("resolved")
    expect(alert.getSnapshot().context).toMatchObject({ acknowledgedAt: 2_000, resolvedAt: 4_000 })
  })

  it("resolves idempotently and never reopens", () => {
    const alert = open()
    alert.send({ type: "alert.resolved", at: 2_000 })
    alert.send({ type: "alert.resolved", at: 9_000 })
    alert.send({ type: "alert.repeated", at: 9_500 })
    expect(alert.getSnapshot().value).toBe("resolved")
    expect(alert.getSnapshot().context).toMatchObject({ resolvedAt: 2_000, lastSeenAt: 1_000 })
  })

  it("auto-resolves on a cleared condition only for autoResolve rules", () => {
    const manual = open()
    manual.send({ type: "alert.cleared", at: 2_000, autoResolve: false })
    expect(manual.getSnapshot().value).toBe("unresolved")
    const auto = open()
    auto.send({ type: "alert.cleared", at: 2_000, autoResolve: true })
    expect(auto.getSnapshot().value).toBe("resolved")
  })
})

describe("threshold rules", () => {
  const rule = { eventName: "temperature", path: "celsius", min: 0, max: 30 }
  it("breaches outside [min, max], clears inside, ignores other events and non-numbers", () => {
    expect(evaluateThreshold(rule, "temperature", { celsius: 31 })).toBe("breach")
    expect(evaluateThreshold(rule, "temperature", { celsius: -1 })).toBe("breach")
    expect(evaluateThreshold(rule, "temperature", { celsius: 30 })).toBe("clear")
    expect(evaluateThreshold(rule, "temperature", { celsius: "12.5" })).toBe("clear")
    expect(evaluateThreshold(rule, "humidity", { celsius: 99 })).toBe("none")
    expect(evaluateThreshold(rule, "temperature", { celsius: "hot" })).toBe("none")
    expect(evaluateThreshold({ eventName: "t", max: 5 }, "t", 6)).toBe("breach")
  })
  it("reads dotted paths", () => {
    expect(valueAt({ a: { b: [1, { c: 2 }] } }, "a.b.1.c")).toBe(2)
    expect(valueAt({ a: 1 }, "a.b")).toBeUndefined()
  })
})
