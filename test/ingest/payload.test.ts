import { describe, expect, it } from "vitest"
import { InvalidInput } from "../../src/domain/errors.ts"
import { MAX_JSON_DEPTH, nestsDeeperThan, parseJson, parseJsonOrText, screen } from "../../src/ingest/payload.ts"

const nested = (levels: number, open = "[", close = "]") => `${open.repeat(levels)}${close.repeat(levels)}`
const nestedObject = (levels: number) => `${'{"a":'.repeat(levels - 1)}{}${"}".repeat(levels - 1)}`

const refusal = (result: unknown) => {
  expect(result).toBeInstanceOf(InvalidInput)
  return result as InvalidInput
}

describe("the payload policy", () => {
  it("takes JSON nested exactly as deep as the limit, arrays and objects alike", () => {
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH))).toBe(false)
    expect(nestsDeeperThan(nestedObject(MAX_JSON_DEPTH))).toBe(false)
    expect(parseJson(nested(MAX_JSON_DEPTH), "payload")).not.toBeInstanceOf(InvalidInput)
    expect(parseJson(nestedObject(MAX_JSON_DEPTH), "payload")).not.toBeInstanceOf(InvalidInput)
  })

  it("refuses one level more before parsing, as text or as UTF-8 bytes", () => {
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1))).toBe(true)
    expect(nestsDeeperThan(Buffer.from(nestedObject(MAX_JSON_DEPTH + 1)))).toBe(true)
    // The crash of issue 15: ~4,500 levels in ~9 KB.
    const deep = refusal(parseJson(Buffer.from(nested(5_000)), "payload"))
    expect(deep.message).toBe("payload: must be at most 64 levels deep")
  })

  it("does not count brackets inside strings, escaped quotes included", () => {
    const text = JSON.stringify({ a: "[[[[".repeat(100), b: "\"{{{{".repeat(100) })
    expect(nestsDeeperThan(text)).toBe(false)
    expect(parseJson(text, "body")).toEqual({ value: JSON.parse(text) })
  })

  it("names the field of every breach and its rule", () => {
    const cases: ReadonlyArray<[string, string]> = [
      ['{"name":"a\\u0000b"}', "name: must not contain NUL characters"],
      ['{"data":{"x\\u0000":1}}', "data.x\\u0000: key must not contain NUL characters"],
      ['{"data":["ok","\\udc00"]}', "data[1]: must be valid Unicode (no lone surrogates)"],
      ['{"data":{"v":1e400}}', "data.v: must be a finite number"],
      [`{"data":${"9".repeat(400)}}`, "data: must be a finite number"],
      ['{"data":{"__proto__":{"admin":true}}}', "data.__proto__: is a reserved key (__proto__, constructor and prototype are refused)"],
      ['{"data":{"constructor":1}}', "data.constructor: is a reserved key (__proto__, constructor and prototype are refused)"],
      ['{"device.prototype":"x"}', "device.prototype: is a reserved key (__proto__, constructor and prototype are refused)"]
    ]
    for (const [text, message] of cases) {
      const result = refusal(parseJson(text, "body"))
      expect(result.message.replace("\u0000", "\\u0000")).toBe(message)
    }
  })

  it("takes what the policy allows unchanged: unicode, large finite numbers, keys that merely contain reserved words", () => {
    const value = { name: "Zähler ⚡ 🌞", data: { max: 1.7976931348623157e308, tiny: 5e-324, proto: 1, myconstructor: "x", list: [null, true, 0] } }
    expect(parseJson(JSON.stringify(value), "body")).toEqual({ value })
  })

  it("counts a dotted key one level per part, as it will be expanded", () => {
    const deepKey = Array.from({ length: MAX_JSON_DEPTH + 1 }, (_, i) => `k${i}`).join(".")
    expect(refusal(screen({ [deepKey]: 1 }, "body")).message).toMatch(/must be at most 64 levels deep$/)
    const fine = Array.from({ length: MAX_JSON_DEPTH }, (_, i) => `k${i}`).join(".")
    expect(screen({ [fine]: 1 }, "body")).toBeUndefined()
  })

  it("bounds values built without JSON text (form fields) by walking them", () => {
    let value: unknown = 1
    for (let i = 0; i < 1_000; i++) value = { v: value }
    expect(refusal(screen(value, "body")).message).toMatch(/must be at most 64 levels deep$/)
  })

  it("reads a form field as JSON when it is JSON, else as text, both under the policy", () => {
    expect(parseJsonOrText('{"a":1}', "data")).toEqual({ value: { a: 1 } })
    expect(parseJsonOrText("plain words", "data")).toEqual({ value: "plain words" })
    expect(refusal(parseJsonOrText("a\u0000b", "data")).field).toBe("data")
    expect(refusal(parseJsonOrText(nested(100), "data")).message).toBe("data: must be at most 64 levels deep")
  })

  it("refuses bytes that are not UTF-8 and text that is not JSON, naming the root", () => {
    expect(refusal(parseJson(Buffer.from([0xff, 0xfe]), "payload")).message).toBe("payload: must be UTF-8 text")
    expect(refusal(parseJson("{nope", "payload")).message).toMatch(/^payload: must be valid JSON/)
  })
})
