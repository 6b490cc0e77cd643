import { describe, expect, it } from "vitest"
import { decide, defaultSignInGuardOptions as options } from "../../src/auth/SignInGuard.ts"

/** `fromAddress` and `fromAnyAddress` count the attempt being decided. */
const after = (fromAddress: number, fromAnyAddress = fromAddress, remainingMs = 60_000) =>
  decide({ fromAddress: fromAddress + 1, fromAnyAddress: fromAnyAddress + 1, remainingMs }, options)

describe("the sign-in guard's decision", () => {
  it("checks the first attempts at once, then slows each by one more step up to the cap", () => {
    expect([0, 2, 3, 4, 9].map((n) => after(n))).toEqual([
      { _tag: "check", delayMs: 0 },
      { _tag: "check", delayMs: 0 },
      { _tag: "check", delayMs: 250 },
      { _tag: "check", delayMs: 500 },
      { _tag: "check", delayMs: 1750 }
    ])
  })

  it("refuses an account at an address after its maximum, until the window ends (at least a second)", () => {
    expect(after(10, 10, 61_500)).toEqual({ _tag: "refuse", retryAfterSeconds: 62 })
    expect(after(25, 25, 10)).toEqual({ _tag: "refuse", retryAfterSeconds: 1 })
  })

  it("never refuses for failures from other addresses: it slows every address alike, up to the cap", () => {
    expect(after(0, 9)).toEqual({ _tag: "check", delayMs: 0 })
    expect(after(0, 10)).toEqual({ _tag: "check", delayMs: 250 })
    expect(after(0, 10_000)).toEqual({ _tag: "check", delayMs: options.maxDelayMs })
  })
})
