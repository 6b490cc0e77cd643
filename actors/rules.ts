/** Pure evaluation of threshold rules against event data (API-DECISIONS "Alerts"). */

export interface ThresholdConfig {
  readonly eventName: string
  /** Dotted path into the event's data; absent: the data itself. */
  readonly path?: string | undefined
  readonly min?: number | undefined
  readonly max?: number | undefined
}

/** The value at a dotted path (`a.b.0`), or undefined. */
export const valueAt = (data: unknown, path: string | undefined): unknown => {
  if (path === undefined || path === "") return data
  let current: unknown = data
  for (const key of path.split(".")) {
    if (current === null || typeof current !== "object") return undefined
    current = (current as Record<string, unknown>)[key]
  }
  return current
}

/** "breach" outside [min, max], "clear" inside, "none" when the event or value does not apply. */
export const evaluateThreshold = (config: ThresholdConfig, eventName: string, data: unknown): "breach" | "clear" | "none" => {
  if (eventName !== config.eventName) return "none"
  const raw = valueAt(data, config.path)
  const value = typeof raw === "string" && raw.trim() !== "" ? Number(raw) : raw
  if (typeof value !== "number" || !Number.isFinite(value)) return "none"
  if (config.min !== undefined && value < config.min) return "breach"
  if (config.max !== undefined && value > config.max) return "breach"
  return "clear"
}
