/**
 * JSON texts for the fuzzer (`fuzz/run.ts`, `test/fuzz/`): valid by construction, or known to
 * break one rule of the payload policy (issue 15, "What must work" 1). They are texts, not
 * values: `1e400`, a lone surrogate escape or a `__proto__` key cannot survive a round trip
 * through a JavaScript value.
 */
import fc from "fast-check"

/** The rules a known-invalid input breaks; `type` is any other schema rule (wrong type, range, length). */
export const INVALIDITIES = ["deep", "nul", "surrogate", "bignum", "proto", "type"] as const
export type Invalidity = (typeof INVALIDITIES)[number]

/** A JSON text and, when it breaks a rule, which. */
export interface Fragment {
  readonly text: string
  readonly invalid: Invalidity | undefined
}

/** Tunes what the generators produce (environment of `npm run fuzz`, or a test's choice). */
export interface PayloadOptions {
  /** Kinds of known-invalid input left out. */
  readonly exclude: ReadonlySet<Invalidity>
  /** The deepest nesting generated (the issue saw the process die from about 4,500 levels). */
  readonly maxDepth: number
}

/** Nesting the policy allows (64 levels); valid inputs stay well inside it, invalid ones well past it. */
export const NESTING_LIMIT = 64

const UNSAFE_KEYS = new Set(["__proto__", "constructor", "prototype"])
const safeKey = (key: string) => !key.includes("\u0000") && key.split(".").every((part) => !UNSAFE_KEYS.has(part))

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** No lone surrogate (`String.prototype.isWellFormed`, ES2024). */
export const wellFormed = (s: string): boolean => !LONE_SURROGATE.test(s)

/** Valid Unicode without NUL: the policy's strings. */
export const cleanString = (minLength: number, maxLength: number): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: "grapheme-ascii", minLength, maxLength }) },
    { weight: 2, arbitrary: fc.string({ unit: "grapheme", minLength, maxLength }) },
    { weight: 1, arbitrary: fc.string({ unit: "binary", minLength, maxLength }) }
  ).filter((s) => !s.includes("\u0000"))

const jsonKey = fc.oneof(
  { weight: 4, arbitrary: cleanString(0, 12) },
  { weight: 1, arbitrary: fc.constantFrom("value", "meter", "a.b", "device.id", "data", "name", "timestamp", "toString", "hasOwnProperty", "") }
).filter(safeKey)

const finite = fc.oneof(
  fc.integer(),
  fc.maxSafeInteger(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -0, 1e308, -1e308, 5e-324, Number.MAX_SAFE_INTEGER)
)

const leaf = fc.oneof(cleanString(0, 24), finite, fc.boolean(), fc.constant(null))

/** A valid JSON value: finite numbers, clean strings and keys, a few levels deep. */
export const jsonValue: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", maxDepth: 6 },
    leaf,
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(jsonKey, tie("value"), { maxKeys: 4 })
  )
})).value

const nested = (depth: number, object: boolean, inner: string) =>
  object ? `${'{"a":'.repeat(depth)}${inner}${"}".repeat(depth)}` : `${"[".repeat(depth)}${inner}${"]".repeat(depth)}`

/** Valid data: any JSON value, sometimes nested up to half the limit. */
export const validData: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: jsonValue.map((v) => JSON.stringify(v) ?? "null") },
  { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 2, max: NESTING_LIMIT / 2 }), fc.boolean()).map(([d, o]) => nested(d, o, "1")) }
)

/** Wraps a bad fragment at a random place inside valid JSON. */
const embedded = (bad: fc.Arbitrary<string>): fc.Arbitrary<string> =>
  fc.tuple(bad, fc.integer({ min: 0, max: 3 }), jsonKey).map(([text, how, key]) =>
    how === 0 ? text : how === 1 ? `[1,${text}]` : how === 2 ? `{${JSON.stringify(key)}:${text}}` : `{"x":{"y":[${text}]}}`
  )

const deep = (maxDepth: number) =>
  fc.tuple(
    fc.oneof(
      { weight: 4, arbitrary: fc.integer({ min: NESTING_LIMIT + 1, max: Math.max(NESTING_LIMIT + 1, Math.min(maxDepth, 300)) }) },
      { weight: 1, arbitrary: fc.integer({ min: NESTING_LIMIT + 1, max: Math.max(NESTING_LIMIT + 1, maxDepth) }) }
    ),
    fc.boolean()
  ).map(([depth, object]) => nested(depth, object, "1"))

/** A string that breaks the string rule: a NUL, or a lone surrogate (as a JSON escape). */
export const badString = (kind: "nul" | "surrogate"): fc.Arbitrary<string> =>
  fc.tuple(cleanString(0, 8), cleanString(0, 8), kind === "nul" ? fc.constant("\u0000") : fc.constantFrom("\udc00", "\ud800", "\udfff", "\ud83d"))
    .map(([a, b, bad]) => `${a}${bad}${b}`)

const badNumber = fc.constantFrom("1e400", "-1e400", "9".repeat(400), `-${"1".repeat(400)}`, "1e309", "123456789e999")

const protoObject = fc.tuple(fc.constantFrom("__proto__", "constructor", "prototype", "a.__proto__", "constructor.x", "x.prototype.y"), jsonValue)
  .map(([key, value]) => `{${JSON.stringify(key)}:${JSON.stringify(value) ?? "null"}}`)

/** Whether any rule of the policy that data can break is left in (`invalidData` has something to draw). */
export const hasInvalidData = (options: PayloadOptions): boolean =>
  (["deep", "nul", "surrogate", "bignum", "proto"] as const).some((kind) => !options.exclude.has(kind))

/** Data that breaks one rule of the policy (the kinds in `options.exclude` left out). */
export const invalidData = (options: PayloadOptions): fc.Arbitrary<Fragment> => {
  const kinds: Array<fc.Arbitrary<Fragment>> = []
  const add = (invalid: Invalidity, arbitrary: fc.Arbitrary<string>) => {
    if (!options.exclude.has(invalid)) kinds.push(arbitrary.map((text) => ({ text, invalid })))
  }
  add("deep", embedded(deep(options.maxDepth)))
  add("nul", embedded(fc.oneof(badString("nul").map((s) => JSON.stringify(s)), badString("nul").map((k) => `{${JSON.stringify(k)}:1}`))))
  add("surrogate", embedded(fc.oneof(badString("surrogate").map((s) => JSON.stringify(s)), badString("surrogate").map((k) => `{${JSON.stringify(k)}:1}`))))
  add("bignum", embedded(badNumber))
  add("proto", embedded(protoObject))
  return kinds.length === 0 ? fc.constant({ text: "null", invalid: undefined }) : fc.oneof(...kinds)
}

/** An event name or command slug that is one MQTT topic level (API-DECISIONS "MQTT"). */
export const validName: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: cleanString(1, 40).filter((s) => !/[/+#]/.test(s)) },
  { weight: 1, arbitrary: fc.constantFrom("temperature", "ping", " ", ".", "..", "$SYS", "électricité", "😀") }
)

/** A name (JSON text) that breaks a rule of the policy or of the schema. */
export const invalidName = (options: PayloadOptions): fc.Arbitrary<Fragment> => {
  const kinds: Array<fc.Arbitrary<Fragment>> = [
    fc.constantFrom("5", "{}", "[]", "null", '""', '"a/b"', '"+"', '"#"', JSON.stringify("n".repeat(201)))
      .map((text) => ({ text, invalid: "type" as const }))
  ]
  for (const kind of ["nul", "surrogate"] as const) {
    if (!options.exclude.has(kind)) kinds.push(badString(kind).map((s) => ({ text: JSON.stringify(s), invalid: kind })))
  }
  return fc.oneof(...kinds)
}

/** An invalid `timestamp` (JSON text). */
export const invalidTimestamp = (options: PayloadOptions): fc.Arbitrary<Fragment> => {
  const kinds: Array<fc.Arbitrary<Fragment>> = [
    fc.constantFrom("-1", "1.5", '"yesterday"', "{}", "true", '"2025-13-45T99:00:00Z"', "8640000000000001")
      .map((text) => ({ text, invalid: "type" as const }))
  ]
  if (!options.exclude.has("bignum")) kinds.push(badNumber.map((text) => ({ text, invalid: "bignum" as const })))
  return fc.oneof(...kinds)
}

/** A valid coordinate in [min, max], as a JSON number or a numeric string. */
export const coordinate = (min: number, max: number): fc.Arbitrary<string> =>
  fc.tuple(fc.double({ min, max, noNaN: true }), fc.boolean()).map(([n, quoted]) => {
    const text = JSON.stringify(n)
    return quoted ? JSON.stringify(text) : text
  })

/** A coordinate (JSON text) that breaks a rule of its range [min, max]. */
export const invalidCoordinate = (options: PayloadOptions, min: number, max: number): fc.Arbitrary<Fragment> => {
  const kinds: Array<fc.Arbitrary<Fragment>> = [
    fc.constantFrom(String(max + 1), String(min - 0.5), JSON.stringify(String(max + 1)), '"north"', "{}", "[]", "null", '"1,5"', "true")
      .map((text) => ({ text, invalid: "type" as const }))
  ]
  if (!options.exclude.has("bignum")) kinds.push(badNumber.map((text) => ({ text, invalid: "bignum" as const })))
  if (!options.exclude.has("nul")) kinds.push(fc.constant({ text: JSON.stringify("1\u0000"), invalid: "nul" as const }))
  return fc.oneof(...kinds)
}

/** A reading amount: at most 6 decimal places (the energy rules allow 20 and 30 integer digits: `src/energy/decimal.ts`). */
const amount = fc.tuple(fc.integer({ min: 0, max: 2 ** 40 }), fc.integer({ min: 0, max: 6 })).map(([units, places]) => units / 10 ** places)

/** Energy readings valid by construction (README "Energy"). */
export const energyData: fc.Arbitrary<string> = fc.oneof(
  amount.map((v) => JSON.stringify(v)),
  fc.record({
    value: amount,
    source: fc.constantFrom("grid", "solar", "wind", "generator", "other"),
    flow: fc.constantFrom("consumption", "production", "import", "export")
  }, { requiredKeys: ["value"] }).map((v) => JSON.stringify(v)),
  fc.record({ meter: amount }).map((v) => JSON.stringify(v))
)
