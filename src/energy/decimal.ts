/**
 * Exact decimal quantities (kWh, m³) as scaled integers. Readings and sums travel as
 * decimal strings and are stored as `numeric`; JavaScript numbers would turn
 * `123456.789 - 123456.5` into `0.28900000000430737`.
 */
export interface Decimal {
  /** The value times 10^scale. */
  readonly units: bigint
  readonly scale: number
}

/**
 * Digits after the point a quantity may carry; finer values are refused, not rounded. Any
 * double a device prints (`0.30000000000000004`) fits.
 */
export const MAX_SCALE = 20

const DECIMAL = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/i

/**
 * A JSON number or a plain decimal string (`"1.25"`) → Decimal; undefined when it is not
 * a finite decimal within `MAX_SCALE` places and 30 integer digits.
 */
export const parseDecimal = (input: unknown): Decimal | undefined => {
  let text: string
  if (typeof input === "number") {
    if (!Number.isFinite(input)) return undefined
    text = String(input)
  } else if (typeof input === "string") {
    if (input.length > 64 || !/^-?\d+(\.\d+)?$/.test(input)) return undefined
    text = input
  } else {
    return undefined
  }
  const match = DECIMAL.exec(text)
  if (match === null) return undefined
  const [, sign, whole, fraction = "", exponent = "0"] = match
  let digits = whole + fraction
  let scale = fraction.length - Number(exponent)
  if (scale < 0) {
    digits += "0".repeat(-scale)
    scale = 0
  }
  // Trailing zeros of the fraction carry no information.
  while (scale > 0 && digits.endsWith("0")) {
    digits = digits.slice(0, -1)
    scale--
  }
  if (scale > MAX_SCALE || digits.replace(/^0+/, "").length - scale > 30) return undefined
  const units = BigInt(digits)
  return { units: sign === "-" ? -units : units, scale }
}

const align = (a: Decimal, b: Decimal): [bigint, bigint, number] => {
  const scale = Math.max(a.scale, b.scale)
  return [a.units * 10n ** BigInt(scale - a.scale), b.units * 10n ** BigInt(scale - b.scale), scale]
}

export const addDecimal = (a: Decimal, b: Decimal): Decimal => {
  if (a.scale === b.scale) return { units: a.units + b.units, scale: a.scale }
  const [x, y, scale] = align(a, b)
  return { units: x + y, scale }
}

export const subtractDecimal = (a: Decimal, b: Decimal): Decimal => {
  const [x, y, scale] = align(a, b)
  return { units: x - y, scale }
}

/** -1, 0 or 1 as `a` is less than, equal to or greater than `b`. */
export const compareDecimal = (a: Decimal, b: Decimal): -1 | 0 | 1 => {
  const [x, y] = align(a, b)
  return x < y ? -1 : x > y ? 1 : 0
}

export const ZERO: Decimal = { units: 0n, scale: 0 }

/** The shortest exact decimal string: `"1.5"`, `"0"`, `"-0.25"`. */
export const formatDecimal = (d: Decimal): string => {
  if (d.units === 0n) return "0"
  const negative = d.units < 0n
  let digits = (negative ? -d.units : d.units).toString()
  let scale = d.scale
  while (scale > 0 && digits.endsWith("0")) {
    digits = digits.slice(0, -1)
    scale--
  }
  if (scale > 0) {
    digits = digits.padStart(scale + 1, "0")
    digits = `${digits.slice(0, -scale)}.${digits.slice(-scale)}`
  }
  return negative ? `-${digits}` : digits
}

/** A decimal string as Postgres prints `numeric` (`"12.500"`) → its shortest form (`"12.5"`). */
export const normalizeDecimal = (text: string): string => {
  if (!text.includes(".")) return text === "-0" ? "0" : text
  const trimmed = text.replace(/0+$/, "").replace(/\.$/, "")
  return trimmed === "-0" || trimmed === "" ? "0" : trimmed
}

/** Sums decimal strings exactly (Postgres `numeric` text in, shortest decimal out). */
export const sumDecimalStrings = (values: Iterable<string>): string => {
  let total = ZERO
  for (const value of values) {
    const d = parseNumericText(value)
    total = addDecimal(total, d)
  }
  return formatDecimal(total)
}

/** Postgres `numeric` text (no exponent, any scale) → Decimal. */
export const parseNumericText = (text: string): Decimal => {
  const negative = text.startsWith("-")
  const body = negative ? text.slice(1) : text
  const point = body.indexOf(".")
  const digits = point < 0 ? body : body.slice(0, point) + body.slice(point + 1)
  const units = BigInt(digits === "" ? "0" : digits)
  return { units: negative ? -units : units, scale: point < 0 ? 0 : body.length - point - 1 }
}
