import Mustache from "mustache"

/**
 * Notification templates are Mustache (logic-less: `{{device.name}}`, sections,
 * no code), written by API clients, so rendering must never execute anything
 * or throw. Values are plain JSON: an object or array prints as its JSON text
 * (`{{event.data}}` → `{"temperature":21.5}`), a missing path prints nothing.
 */

/**
 * `none` for plain text; `html` when the output is HTML; `json` for a JSON body: a value inside
 * one of the template's JSON strings is escaped as JSON string content (`{"name":"{{device.name}}"}`
 * stays one field whatever the name holds), one outside them prints as it is (`"data":{{event.data}}`
 * embeds the data's JSON).
 */
export type Escaping = "none" | "html" | "json"

/** What a template may refer to, e.g. `{ device: { id, name }, event: { name, data } }`. */
export type TemplateData = { readonly [name: string]: unknown }

/** JSON text of any value (bigints as strings); `undefined` for what JSON cannot hold (functions, cycles). */
export const jsonText = (value: unknown): string | undefined => {
  try {
    return JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v))
  } catch {
    return undefined
  }
}

/**
 * Rebuilds every object without a prototype, so a template reaches only the
 * data's own fields (`{{alert.constructor}}` prints nothing), and gives objects
 * and arrays a `Symbol.toPrimitive` — unreachable from a template — that prints
 * them as JSON.
 */
const revive = (_key: string, value: unknown): unknown => {
  if (value === null || typeof value !== "object") return value
  let target: object = value
  if (!Array.isArray(value)) {
    const bare: Record<string, unknown> = Object.create(null)
    target = Object.assign(bare, value)
  }
  Object.defineProperty(target, Symbol.toPrimitive, { value: () => JSON.stringify(target) })
  return target
}

/** Each top-level entry on its own, so one value JSON cannot hold leaves the others usable. */
const toView = (data: TemplateData): Record<string, unknown> => {
  const view: Record<string, unknown> = Object.create(null)
  for (const [name, value] of Object.entries(data)) {
    const text = jsonText(value)
    if (text !== undefined) view[name] = JSON.parse(text, revive)
  }
  Object.defineProperty(view, Symbol.toPrimitive, { value: () => JSON.stringify(view) })
  return view
}

const asText = (value: unknown): string => String(value)

type Token = ReadonlyArray<unknown>

/**
 * The `{{name}}` tags of a parsed template that stand inside a JSON string of its text: the
 * text between tags is read as JSON (a `"` opens or closes a string unless backslashed), a
 * section's content in order, as it is written.
 */
const insideJsonStrings = (tokens: ReadonlyArray<Token>): WeakSet<Token> => {
  const inside = new WeakSet<Token>()
  let inString = false
  let backslash = false
  const walk = (list: ReadonlyArray<Token>) => {
    for (const token of list) {
      const type = token[0]
      if (type === "text") {
        for (const ch of String(token[1])) {
          if (!inString) inString = ch === "\""
          else if (backslash) backslash = false
          else if (ch === "\\") backslash = true
          else if (ch === "\"") inString = false
        }
      } else if (type === "name") {
        if (inString) inside.add(token)
      } else if ((type === "#" || type === "^") && Array.isArray(token[4])) walk(token[4])
    }
  }
  walk(tokens)
  return inside
}

/** JSON string content for a value (its JSON text, for an object or array), without the quotes. */
const jsonStringContent = (value: unknown): string => JSON.stringify(String(value)).slice(1, -1)

/** Renders `{{name}}` by where it stands in a JSON template (`insideJsonStrings`). */
class JsonWriter extends Mustache.Writer {
  inside = new WeakSet<Token>()
  override escapedValue(token: Array<string>, context: Mustache.Context, config?: Mustache.RenderOptions): string {
    const value: unknown = context.lookup(token[1])
    if (value === null || value === undefined) return ""
    return this.inside.has(token) ? jsonStringContent(value) : String(value)
  }
}

/**
 * Renders `source` with `data`. Never throws: a malformed template (an unclosed
 * tag or section) comes back as its own source text; see {@link templateError}.
 */
export const renderTemplate = (source: string, data: TemplateData, escaping: Escaping = "none"): string => {
  try {
    // A Writer per call: no process-wide parse cache growing with every template ever edited.
    if (escaping === "json") {
      const writer = new JsonWriter()
      // Render parses again and finds these same tokens in the writer's cache.
      writer.inside = insideJsonStrings(writer.parse(source))
      return writer.render(source, toView(data))
    }
    const writer = new Mustache.Writer()
    return writer.render(source, toView(data), undefined, escaping === "none" ? { escape: asText } : {})
  } catch {
    return source
  }
}

/** Why `source` is not a valid template, or `undefined` when it is (for validating templates on write). */
export const templateError = (source: string): string | undefined => {
  try {
    new Mustache.Writer().parse(source)
    return undefined
  } catch (error) {
    return error instanceof Error ? error.message : String(error)
  }
}
