import { compareDecimal, type Decimal, subtractDecimal } from "./decimal.ts"

/**
 * A cumulative register reading (`{"meter": …}`) → the consumption since the previous one
 * (API-DECISIONS "Energy readings"): the first register value only sets the baseline, and a
 * value below the previous one is a meter reset, whose consumption is the new value itself
 * (the register restarted from zero).
 *
 * Pure, with no imports beyond decimal arithmetic, so the device actor can call it when it
 * takes over the baselines; until then the store keeps them (`energy_meters`).
 */
export const meterDelta = (previous: Decimal | undefined, current: Decimal): Decimal | undefined => {
  if (previous === undefined) return undefined
  return compareDecimal(current, previous) < 0 ? current : subtractDecimal(current, previous)
}
