/** The value of one sample of a Prometheus scrape, by its name and labels as printed; undefined when absent. */
export const sample = (scrape: string, series: string): number | undefined => {
  const line = scrape.split("\n").find((l) => l.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}
