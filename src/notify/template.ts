import Mustache from "mustache"

/**
 * Notification templates are Mustache (logic-less: `{{device.name}}`, sections,
 * no code), written by API clients, so rendering must never execute anything
 * or throw. Values are plain JSON: an object or array prints as its JSON text
 * (`{{event.data}}` → `{"temperature":21.5}`), a missing path prints nothing.
 */

/** `none` for webhook bodies and plain-text e-mail; `html` when the output is HTML. */
export type Escaping = "none" | "html"

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

/**
 * Renders `source` with `data`. Never throws: a malformed template (an unclosed
 * tag or section) comes back as its own source text; see {@link templateError}.
 */
export const renderTemplate = (source: string, data: TemplateData, escaping: Escaping = "none"): string => {
  try {
    // A Writer per call: no process-wide parse cache growing with every template ever edited.
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
