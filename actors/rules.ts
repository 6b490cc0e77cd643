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

export interface AnomalyConfig {
  readonly eventName: string
  readonly path?: string | undefined
  /** How many previous values form the baseline. */
  readonly window: number
  /** How many standard deviations from the baseline's mean count as an anomaly. */
  readonly zScore: number
}

/**
 * One step of an anomaly rule: the value is compared with the mean and standard deviation of
 * the previous `window` values (once there are that many), then joins them.
 */
export const anomalyStep = (
  config: AnomalyConfig,
  history: ReadonlyArray<number>,
  eventName: string,
  data: unknown
): { readonly verdict: "breach" | "clear" | "none"; readonly history: ReadonlyArray<number>; readonly z?: number } => {
  if (eventName !== config.eventName) return { verdict: "none", history }
  const raw = valueAt(data, config.path)
  const value = typeof raw === "string" && raw.trim() !== "" ? Number(raw) : raw
  if (typeof value !== "number" || !Number.isFinite(value)) return { verdict: "none", history }
  const next = [...history, value].slice(-config.window)
  if (history.length < config.window) return { verdict: "none", history: next }
  const mean = history.reduce((a, b) => a + b, 0) / history.length
  const variance = history.reduce((a, b) => a + (b - mean) ** 2, 0) / history.length
  const sd = Math.sqrt(variance)
  const z = sd === 0 ? (value === mean ? 0 : Infinity) : Math.abs(value - mean) / sd
  return { verdict: z > config.zScore ? "breach" : "clear", history: next, z }
}
