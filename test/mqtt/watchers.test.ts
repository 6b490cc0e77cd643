import { describe, expect, it } from "vitest"
import { Watchers } from "../../src/adapters/mqtt/sessions.ts"

/** Which devices' deliveries go through aedes: those some open connection here watches. */
describe("Watchers", () => {
  it("keeps a device watched until the last connection watching it is released", () => {
    const watchers = new Watchers()
    expect(watchers.has("dev_a")).toBe(false)
    watchers.add("dev_a")
    watchers.add("dev_a")
    watchers.add("dev_b")
    watchers.release(["dev_a"])
    expect(watchers.has("dev_a")).toBe(true)
    expect(watchers.has("dev_b")).toBe(true)
    watchers.release(new Set(["dev_a", "dev_b"]))
    expect(watchers.has("dev_a")).toBe(false)
    expect(watchers.has("dev_b")).toBe(false)
  })

  it("ignores the release of a device it does not count, and counts it again when added", () => {
    const watchers = new Watchers()
    watchers.release(["dev_never"])
    expect(watchers.has("dev_never")).toBe(false)
    watchers.add("dev_never")
    watchers.release(["dev_never", "dev_never"])
    expect(watchers.has("dev_never")).toBe(false)
    watchers.add("dev_never")
    expect(watchers.has("dev_never")).toBe(true)
  })
})
