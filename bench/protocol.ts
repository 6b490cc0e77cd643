/** What `bench/rest.ts` and its load process `bench/load.ts` exchange over stdin and stdout. */

/** The line `load.ts` prints as the measured run starts, after the warm-up. */
export const MEASURING = "measuring"

export interface LoadSpec {
  readonly url: string
  /** Paths the connections rotate through, one per request. */
  readonly paths: ReadonlyArray<string>
  readonly headers: Readonly<Record<string, string>>
  readonly connections: number
  readonly durationSeconds: number
  readonly warmupSeconds: number
}

export interface LoadResult {
  readonly requestsPerSecond: number
  readonly requests: number
  /** autocannon records latency in whole milliseconds. */
  readonly latencyMs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number; readonly mean: number }
  readonly non2xx: number
  readonly errors: number
  readonly timeouts: number
  readonly bytesPerResponse: number
  readonly durationSeconds: number
  /** CPU time of this process during the measured run, as a share of one core. */
  readonly loadCpuShare: number
}
