/**
 * The in-process arithmetic of a write batch: exact rollup sums per (series, bucket), kept
 * as micro-units in doubles while they fit; the order readings enter the index in; and the
 * array literals the rows travel to the database as.
 */
import { addDecimal, type Decimal, formatDecimal, parseNumericText } from "./decimal.ts"

/** `{1,2.5,3}`: an array literal of numbers or plain decimals, which need no quoting. */
export const plainArray = (values: ReadonlyArray<number | string>): string => `{${values.join(",")}}`

/** A text array literal, every element quoted; null → NULL. */
export const textArray = (values: ReadonlyArray<string | null>): string =>
  `{${values.map((v) => (v === null ? "NULL" : `"${v.replace(/[\\"]/g, "\\$&")}"`)).join(",")}}`

/** Largest micro-unit sum kept in a double before it moves into the exact total (2^52). */
const FAST_LIMIT = 4_503_599_627_370_496
const POW10 = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000]

/**
 * A plain decimal of at most 9 integer digits and 6 places → its millionths, an integer a
 * double holds exactly; -1 for anything else (more places, larger), which takes the exact path.
 */
export const microUnits = (text: string): number => {
  const n = text.length
  let whole = 0
  let i = 0
  for (; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === 46) break
    if (c < 48 || c > 57 || i >= 9) return -1
    whole = whole * 10 + (c - 48)
  }
  if (i === 0) return -1
  if (i === n) return whole * 1_000_000
  let fraction = 0
  const places = n - i - 1
  if (places < 1 || places > 6) return -1
  for (i++; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c < 48 || c > 57) return -1
    fraction = fraction * 10 + (c - 48)
  }
  return whole * 1_000_000 + fraction * POW10[6 - places]
}

/** One rollup sum: millionths in a double while they fit, the rest exact. */
class Sum {
  micro = 0
  exact: Decimal | undefined = undefined

  /** `micro` from `microUnits`, or -1 with the quantity's text. */
  add(micro: number, quantity: string): void {
    if (micro < 0) this.addExact(parseNumericText(quantity))
    else {
      this.micro += micro
      if (this.micro >= FAST_LIMIT) {
        this.addExact({ units: BigInt(this.micro), scale: 6 })
        this.micro = 0
      }
    }
  }

  addSum(other: Sum): void {
    if (other.exact !== undefined) this.addExact(other.exact)
    this.add(other.micro, "")
  }

  private addExact(amount: Decimal): void {
    this.exact = this.exact === undefined ? amount : addDecimal(this.exact, amount)
  }

  text(): string {
    const micro: Decimal = { units: BigInt(this.micro), scale: 6 }
    return formatDecimal(this.exact === undefined ? micro : addDecimal(this.exact, micro))
  }
}

/**
 * Sums per (series, bucket), exact: the work of a GROUP BY done in the server process, so
 * the database receives one row per rollup row. Quantities of up to 6 places (any meter
 * prints) are summed as integer millionths in doubles, others as scaled big integers.
 */
export class Rollup {
  private readonly sums = new Map<number, Map<number, Sum>>()

  sum(series: number, bucket: number): Sum {
    let buckets = this.sums.get(series)
    if (buckets === undefined) this.sums.set(series, buckets = new Map())
    let sum = buckets.get(bucket)
    if (sum === undefined) buckets.set(bucket, sum = new Sum())
    return sum
  }

  entries(): Iterable<[number, Map<number, Sum>]> {
    return this.sums
  }

  /** Array literals of series, bucket and quantity, sorted by series, then bucket. */
  columns(): [string, string, string] {
    const series: Array<number> = []
    const buckets: Array<number> = []
    const quantities: Array<string> = []
    for (const id of [...this.sums.keys()].sort((a, b) => a - b)) {
      const byBucket = this.sums.get(id)!
      for (const bucket of [...byBucket.keys()].sort((a, b) => a - b)) {
        series.push(id)
        buckets.push(bucket)
        quantities.push(byBucket.get(bucket)!.text())
      }
    }
    return [plainArray(series), plainArray(buckets), plainArray(quantities)]
  }
}

/**
 * Row indices ordered by (series, timestamp), stable: readings enter the `(series_id,
 * timestamp)` index one leaf page after another instead of one series per row, which roughly
 * halves the database's work for time-major batches (every device, a few hours).
 * `group[i]` is row i's series as an index into `seriesOfGroup`.
 */
export const insertionOrder = (group: Int32Array, seriesOfGroup: ReadonlyArray<number>, timestamps: ReadonlyArray<number>): Array<number> => {
  const groups = seriesOfGroup.length
  const ranked = Array.from({ length: groups }, (_, g) => g).sort((a, b) => seriesOfGroup[a] - seriesOfGroup[b])
  const counts = new Int32Array(groups)
  for (let i = 0; i < group.length; i++) counts[group[i]]++
  // Where each group starts, in series order.
  const offset = new Int32Array(groups)
  let at = 0
  for (const g of ranked) {
    offset[g] = at
    at += counts[g]
  }
  const out = new Array<number>(group.length)
  const next = Int32Array.from(offset)
  for (let i = 0; i < group.length; i++) out[next[group[i]]++] = i
  for (const g of ranked) {
    const from = offset[g]
    const to = next[g]
    for (let k = from + 1; k < to; k++) {
      if (timestamps[out[k]] < timestamps[out[k - 1]]) {
        const sorted = out.slice(from, to).sort((a, b) => timestamps[a] - timestamps[b] || a - b)
        for (let j = 0; j < sorted.length; j++) out[from + j] = sorted[j]
        break
      }
    }
  }
  return out
}
