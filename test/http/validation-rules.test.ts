import { z } from "@hono/zod-openapi"
import { describe, expect, it } from "vitest"
import { parseInput } from "../../src/adapters/validation.ts"
import { InvalidInput } from "../../src/domain/errors.ts"

const refusal = (schema: z.ZodType, value: unknown): string => {
  const result = parseInput(schema, value, "body")
  if (!(result instanceof InvalidInput)) throw new Error(`${JSON.stringify(value)} was accepted`)
  return result.message
}

/** Each kind of zod issue, in a schema no route has yet: the wording a future schema gets. */
const CASES: ReadonlyArray<[string, z.ZodType, unknown, string]> = [
  ["missing field", z.object({ a: z.string() }), {}, "a: is required"],
  ["missing enum field", z.object({ a: z.enum(["x", "y"]) }), {}, "a: is required"],
  ["missing literal field", z.object({ a: z.literal("x") }), {}, "a: is required"],
  ["wrong type: string", z.object({ a: z.string() }), { a: 1 }, "a: must be a string"],
  ["wrong type: number", z.object({ a: z.number() }), { a: "1" }, "a: must be a number"],
  ["wrong type: boolean", z.object({ a: z.boolean() }), { a: "true" }, "a: must be a boolean"],
  ["wrong type: array", z.object({ a: z.array(z.string()) }), { a: "x" }, "a: must be an array"],
  ["wrong type: object", z.object({ a: z.object({}) }), { a: [] }, "a: must be an object"],
  ["wrong type: record", z.object({ a: z.record(z.string(), z.number()) }), { a: 1 }, "a: must be an object"],
  ["wrong type: null", z.object({ a: z.null() }), { a: 0 }, "a: must be null"],
  ["not finite", z.object({ a: z.number() }), { a: Number.POSITIVE_INFINITY }, "a: must be a finite number"],
  ["not an integer", z.object({ a: z.number().int() }), { a: 1.5 }, "a: must be an integer"],
  ["integer out of range", z.object({ a: z.number().int().min(1).max(200) }), { a: 201 }, "a: must be an integer from 1 to 200"],
  ["string instead of a bounded integer", z.object({ a: z.number().int().min(1).max(200) }), { a: "5" }, "a: must be an integer from 1 to 200"],
  ["number out of range", z.object({ a: z.number().min(-1.5).max(1.5) }), { a: 2 }, "a: must be a number from -1.5 to 1.5"],
  ["below a minimum", z.object({ a: z.number().min(3) }), { a: 2 }, "a: must be at least 3"],
  ["above a maximum", z.object({ a: z.number().max(3) }), { a: 4 }, "a: must be at most 3"],
  ["not positive", z.object({ a: z.number().positive() }), { a: 0 }, "a: must be greater than 0"],
  ["not negative", z.object({ a: z.number().negative() }), { a: 0 }, "a: must be less than 0"],
  ["not a multiple", z.object({ a: z.number().multipleOf(5) }), { a: 7 }, "a: must be a multiple of 5"],
  ["empty string", z.object({ a: z.string().min(1) }), { a: "" }, "a: must not be empty"],
  ["short string", z.object({ a: z.string().min(3) }), { a: "ab" }, "a: must be at least 3 characters"],
  ["long string", z.object({ a: z.string().max(2) }), { a: "abc" }, "a: must be at most 2 characters"],
  ["exact length", z.object({ a: z.string().length(3) }), { a: "ab" }, "a: must be exactly 3 characters"],
  ["empty array", z.object({ a: z.array(z.number()).min(1) }), { a: [] }, "a: must not be empty"],
  ["long array", z.object({ a: z.array(z.number()).max(2) }), { a: [1, 2, 3] }, "a: must have at most 2 items"],
  ["array element", z.object({ a: z.array(z.object({ b: z.number() })) }), { a: [{ b: 1 }, { b: "x" }] }, "a[1].b: must be a number"],
  ["enum", z.object({ a: z.enum(["low", "high"]) }), { a: "mid" }, "a: must be one of low, high"],
  ["literal", z.object({ a: z.literal(3) }), { a: 4 }, "a: must be 3"],
  ["e-mail", z.object({ a: z.email() }), { a: "x" }, "a: must be an e-mail address"],
  ["URL", z.object({ a: z.url() }), { a: "x" }, "a: must be a URL"],
  ["UUID", z.object({ a: z.uuid() }), { a: "x" }, "a: must be a UUID"],
  ["date-time", z.object({ a: z.iso.datetime() }), { a: "x" }, "a: must be an ISO-8601 date-time"],
  ["prefix", z.object({ a: z.string().startsWith("d_") }), { a: "x" }, "a: must start with \"d_\""],
  ["record key", z.object({ a: z.record(z.string().min(2), z.number()) }), { a: { b: 1 } }, "a.b: is not an accepted key; a key must be at least 2 characters"],
  ["unknown key", z.strictObject({ a: z.string() }), { a: "x", b: 1 }, "b: is not a known field"],
  ["refinement without a message", z.object({ a: z.string().refine((s) => s !== "x") }), { a: "x" }, "a: is not accepted"],
  ["message of the schema", z.object({ a: z.string().min(8, { message: "must be at least 8 characters" }) }), { a: "x" }, "a: must be at least 8 characters"],
  ["whole value", z.object({ a: z.string() }), "x", "body: must be an object"],
  ["union of types, missing", z.object({ a: z.union([z.number(), z.string()]) }), {}, "a: is required"],
  ["union of types, the first option names it", z.object({ a: z.union([z.number(), z.string()]) }), { a: {} }, "a: must be a number"],
  ["union of objects, the closest option", z.object({ a: z.union([z.object({ n: z.number() }), z.object({ s: z.string(), t: z.string() })]) }), {
    a: { s: "x", t: 1 }
  }, "a.t: must be a string"],
  ["discriminated union, unknown tag", z.discriminatedUnion("k", [z.object({ k: z.literal("p") }), z.object({ k: z.literal("q") })]), { k: "r" }, "k: must be one of p, q"],
  ["discriminated union, no tag", z.discriminatedUnion("k", [z.object({ k: z.literal("p") }), z.object({ k: z.literal("q") })]), {}, "k: is required"],
  ["exclusive union, both match", z.object({ a: z.xor([z.string(), z.string().min(1)]) }), { a: "x" }, "a: must match exactly one of the accepted forms"]
]

describe("every kind of zod issue is worded as a rule", () => {
  for (const [name, schema, value, message] of CASES) {
    it(`${name}: ${message}`, () => {
      expect(refusal(schema, value)).toBe(message)
    })
  }
})
