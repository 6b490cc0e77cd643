import { describe, expect, it } from "vitest"
import { newId } from "../../src/domain/ids.ts"

const CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
const decodeTime = (text: string) => [...text].reduce((ms, c) => ms * 32 + CROCKFORD.indexOf(c), 0)

describe("newId", () => {
  it("is the prefix, ten characters of the millisecond and sixteen random ones, all Crockford base 32", () => {
    const now = Date.UTC(2026, 10, 29, 9, 0, 0, 123)
    const id = newId("evt", now)
    expect(id).toMatch(/^evt_[0-9a-hjkmnp-tv-z]{26}$/)
    expect(decodeTime(id.slice(4, 14))).toBe(now)
  })

  it("sorts by the millisecond it was made in", () => {
    const ids = [newId("cmd", 1_000_000), newId("cmd", 999_999), newId("cmd", 1_000_001), newId("cmd", 1_795_938_052_667)]
    expect([...ids].sort()).toEqual([ids[1], ids[0], ids[2], ids[3]])
  })

  it("never repeats, across many refills of the random pool, and its random part uses every symbol evenly", () => {
    const now = Date.now()
    const ids = Array.from({ length: 50_000 }, () => newId("loc", now))
    expect(new Set(ids).size).toBe(ids.length)
    const counts = new Map<string, number>()
    for (const id of ids) for (const c of id.slice(14)) counts.set(c, (counts.get(c) ?? 0) + 1)
    expect([...counts.keys()].sort().join("")).toBe(CROCKFORD)
    // 800,000 characters over 32 symbols: 25,000 each, give or take well under 5 %.
    for (const n of counts.values()) expect(Math.abs(n - 25_000)).toBeLessThan(1_250)
  })
})
