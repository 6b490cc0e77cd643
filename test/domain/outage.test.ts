import { describe, expect, it } from "vitest"
import { makeOutage } from "../../src/domain/outage.ts"

const setup = () => {
  const lines: Array<string> = []
  let clock = 0
  const outage = makeOutage(
    { lost: (reason) => `lost (${reason})`, restored: (seconds) => `back after ${seconds} s` },
    { warn: (m) => lines.push(`warn ${m}`), info: (m) => lines.push(`info ${m}`) },
    () => clock
  )
  return { outage, lines, advance: (ms: number) => (clock += ms) }
}

describe("an outage", () => {
  it("logs the first loss and the recovery once, however many failures and successes come between", () => {
    const { outage, lines, advance } = setup()
    outage.restored(outage.epoch)
    expect(lines).toEqual([])
    outage.lost("first")
    outage.lost("second")
    outage.lost("third")
    expect(outage.down).toBe(true)
    advance(1_234)
    const epoch = outage.epoch
    outage.restored(epoch)
    outage.restored(epoch)
    expect(outage.down).toBe(false)
    expect(lines).toEqual(["warn lost (first)", "info back after 1.2 s"])
  })

  it("does not count as the recovery work that started before the last sign of loss", () => {
    const { outage, lines, advance } = setup()
    outage.lost("a connection closed")
    const started = outage.epoch
    outage.lost("another connection closed")
    outage.restored(started)
    expect(outage.down).toBe(true)
    advance(40)
    outage.restored(outage.epoch)
    expect(lines).toEqual(["warn lost (a connection closed)", "info back after 0.04 s"])
  })

  it("logs a second outage as its own pair", () => {
    const { outage, lines } = setup()
    outage.lost("one")
    outage.restored(outage.epoch)
    outage.lost("two")
    outage.restored(outage.epoch)
    expect(lines).toEqual(["warn lost (one)", "info back after 0.00 s", "warn lost (two)", "info back after 0.00 s"])
  })

  it("does not count as a new loss a failure of work that started before the recovery", () => {
    const { outage, lines } = setup()
    outage.lost("down")
    const startedDuringTheOutage = outage.epoch
    outage.restored(outage.epoch)
    outage.lost("a connection attempt begun during the outage failed", startedDuringTheOutage)
    expect(outage.down).toBe(false)
    outage.lost("down again", outage.epoch)
    expect(outage.down).toBe(true)
    expect(lines).toEqual(["warn lost (down)", "info back after 0.00 s", "warn lost (down again)"])
  })
})
