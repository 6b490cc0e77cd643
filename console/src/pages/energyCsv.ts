/** What the energy chart shows, as CSV: one row per bucket, one column per series. */
export const toCsv = (timestamps: ReadonlyArray<number>, series: ReadonlyArray<{ label: string; values: ReadonlyArray<number | null> }>): string => {
  const quote = (text: string) => (/[",\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text)
  const lines = [["timestamp", ...series.map((s) => s.label)].map(quote).join(",")]
  timestamps.forEach((t, i) => lines.push([new Date(t).toISOString(), ...series.map((s) => String(s.values[i] ?? ""))].join(",")))
  return `${lines.join("\n")}\n`
}
