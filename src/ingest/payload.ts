import { InvalidInput } from "../domain/errors.ts"

/**
 * The payload policy every protocol applies to what a client sends (REST bodies, query
 * strings and path parameters, MQTT payloads and topics, CoAP payloads), so that no input can
 * reach a recursive serialiser too deep, or the store with text it cannot hold:
 * - JSON nests at most `MAX_JSON_DEPTH` levels, counted on the text before it is parsed (bulk
 *   energy-import rows after, by `screen`: `JSON.parse` does not recurse, src/energy/import.ts);
 * - strings (values and keys) are well-formed Unicode without NUL, which Postgres text and
 *   jsonb refuse;
 * - numbers are finite (`1e400` and a 400-digit integer parse to Infinity, which JSON cannot
 *   carry and would be stored as null);
 * - the keys `__proto__`, `constructor` and `prototype` are refused, anywhere and in every part
 *   of a dotted key: kept, they reach prototypes in the clients that read them back, and
 *   dropped, a client's data would change silently. No field of the interface has such a name.
 * A breach is an `InvalidInput` naming the field and the rule (400, a dropped and counted MQTT
 * publish, CoAP 4.00).
 */

/** Levels of nesting JSON may have: `{"a": [1]}` has 2. Device payloads need a handful. */
export const MAX_JSON_DEPTH = 64

/** Keys refused at every level (see above). */
export const RESERVED_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"])

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d

/**
 * True when JSON text nests deeper than `max`, found in one pass over the text (or its UTF-8
 * bytes: every character that matters is ASCII) without parsing it. Brackets inside strings do
 * not count. Malformed text is left for the parser to refuse.
 */
export const nestsDeeperThan = (text: string | Uint8Array, max: number = MAX_JSON_DEPTH): boolean => {
  const bytes = typeof text !== "string"
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = bytes ? (text as Uint8Array)[i] : (text as string).charCodeAt(i)
    if (inString) {
      if (c === BACKSLASH) i++
      else if (c === QUOTE) inString = false
    } else if (c === QUOTE) inString = true
    else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > max) return true
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--
  }
  return false
}

const fieldOf = (root: string, path: ReadonlyArray<string | number>): string => {
  // An array at the root is named by the root: `rows[17].timestamp`.
  let field = typeof path[0] === "number" ? root : ""
  for (const part of path) field += typeof part === "number" ? `[${part}]` : field === "" ? part : `.${part}`
  return field === "" ? root : field
}

const refusal = (root: string, path: ReadonlyArray<string | number>, rule: string) => {
  const field = fieldOf(root, path)
  return new InvalidInput({ field, message: `${field}: ${rule}` })
}

/** Why a string breaks the policy, or undefined. */
export const stringRule = (text: string): string | undefined =>
  text.includes("\u0000")
    ? "must not contain NUL characters"
    : text.isWellFormed()
    ? undefined
    : "must be valid Unicode (no lone surrogates)"

const tooDeep = `must be at most ${MAX_JSON_DEPTH} levels deep`
const reserved = "is a reserved key (__proto__, constructor and prototype are refused)"

/**
 * The first breach of the policy in a value (parsed JSON, form fields, query parameters), named
 * by its path from `root` (`data.readings[3].value`), or undefined. A dotted key (`device.id`,
 * expanded later into nested objects) counts one level per part, and each part is checked.
 * Files and other non-JSON objects are left alone. Recursion is bounded by the depth limit.
 */
export const screen = (value: unknown, root: string): InvalidInput | undefined => {
  const path: Array<string | number> = []
  const visit = (value: unknown, depth: number): InvalidInput | undefined => {
    switch (typeof value) {
      case "string": {
        const rule = stringRule(value)
        return rule === undefined ? undefined : refusal(root, path, rule)
      }
      case "number":
        return Number.isFinite(value) ? undefined : refusal(root, path, "must be a finite number")
      case "object": {
        if (value === null) return undefined
        if (depth >= MAX_JSON_DEPTH) return refusal(root, path, tooDeep)
        if (Array.isArray(value)) {
          for (let i = 0; i < value.length; i++) {
            path.push(i)
            const found = visit(value[i], depth + 1)
            path.pop()
            if (found !== undefined) return found
          }
          return undefined
        }
        const prototype: unknown = Object.getPrototypeOf(value)
        if (prototype !== Object.prototype && prototype !== null) return undefined
        for (const key of Object.keys(value)) {
          path.push(key)
          let levels = 1
          if (RESERVED_KEYS.has(key)) return refusal(root, path, reserved)
          const rule = stringRule(key)
          if (rule !== undefined) return refusal(root, path, `key ${rule}`)
          if (key.includes(".")) {
            const parts = key.split(".")
            if (parts.some((part) => RESERVED_KEYS.has(part))) return refusal(root, path, reserved)
            levels = parts.length
            if (depth + levels > MAX_JSON_DEPTH) return refusal(root, path, tooDeep)
          }
          const found = visit((value as Record<string, unknown>)[key], depth + levels)
          path.pop()
          if (found !== undefined) return found
        }
        return undefined
      }
      default:
        return undefined
    }
  }
  return visit(value, 0)
}

/** A parsed JSON value that meets the policy. */
export interface Parsed {
  readonly value: unknown
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * JSON text (or UTF-8 bytes) → its value under the policy: the depth is checked before
 * parsing, the value after. `root` names the whole (`body`, `payload`).
 */
export const parseJson = (text: string | Uint8Array, root: string): Parsed | InvalidInput => {
  if (nestsDeeperThan(text)) return new InvalidInput({ field: root, message: `${root}: ${tooDeep}` })
  let source: string
  try {
    source = typeof text === "string" ? text : utf8.decode(text)
  } catch {
    return new InvalidInput({ field: root, message: `${root}: must be UTF-8 text` })
  }
  let value: unknown
  try {
    value = JSON.parse(source)
  } catch (error) {
    return new InvalidInput({ field: root, message: `${root}: must be valid JSON (${error instanceof Error ? error.message : "parse error"})` })
  }
  const breach = screen(value, root)
  return breach ?? { value }
}

/**
 * A form field that may hold JSON: its value under the policy when it parses, else the text
 * itself (also under the policy).
 */
export const parseJsonOrText = (text: string, root: string): Parsed | InvalidInput => {
  if (nestsDeeperThan(text)) return new InvalidInput({ field: root, message: `${root}: ${tooDeep}` })
  let value: unknown = text
  try {
    value = JSON.parse(text)
  } catch {
    // Not JSON: the text is the value.
  }
  return screen(value, root) ?? { value }
}
