/**
 * What `bench/ingest.ts` and its load processes (`bench/ingest-load.ts`) exchange. The
 * orchestrator writes one `LoadSpec` as a JSON line on stdin; the process connects and
 * prints `ready <json>`; for timed modes the orchestrator then writes `go <epoch ms>` (the
 * moment the warm-up starts, the same for every load process) and the process prints one
 * result as a JSON line when done. An idle process holds its connections until it reads
 * `close` (or stdin ends).
 */
export const READY = "ready"

export interface DeviceCredential {
  readonly id: string
  /** The device secret key (MQTT username, CoAP accessToken, HTTP bearer); "" on a broker without auth. */
  readonly key: string
}

export interface Timing {
  readonly warmupMs: number
  readonly durationMs: number
  /** After the window, how long outstanding publishes may take to be acknowledged. */
  readonly drainLimitMs: number
}

/**
 * For an `mqtts:` URL: the PEM certificate the broker's must chain to (bench/ingest.ts's
 * target `tls` passes its self-signed one); absent for `mqtt:`. Trusting it rather than turning
 * verification off (`rejectUnauthorized: false`) connects as a device would, and a wrong
 * certificate or address fails the case at connect instead of being measured unnoticed; the
 * server's side of the handshake is the same either way.
 */
export type TrustedCa = string | undefined

export type Transport =
  | { readonly kind: "mqtt"; readonly url: string; readonly qos: 0 | 1; readonly ca: TrustedCa }
  | { readonly kind: "coap"; readonly host: string; readonly port: number }
  | { readonly kind: "http"; readonly url: string }

/** Devices publishing events: as fast as the in-flight windows allow, or at a fixed rate. */
export interface PublishSpec extends Timing {
  readonly mode: "publish"
  readonly transport: Transport
  readonly devices: ReadonlyArray<DeviceCredential>
  /** Unique per load process and run: MQTT client ids. */
  readonly clientPrefix: string
  /** The event name in the measured window; the warm-up publishes `warmupName`. */
  readonly name: string
  readonly warmupName: string
  /** Events per second from this process; absent: closed loop, as fast as the windows allow. */
  readonly rate?: number
  /** Publishes in flight per device (MQTT QoS 1, CoAP), or concurrent HTTP requests of this process. */
  readonly window: number
  /** MQTT QoS 0, closed loop: after this many QoS 0 publishes a connection sends one QoS 1 (the fence). */
  readonly fenceEvery: number
  /** MQTT QoS 0, closed loop: fences a connection may have unacknowledged. */
  readonly fencesInFlight: number
}

/** One application connection subscribed to every device's events, timing each delivery. */
export interface SubscribeSpec extends Timing {
  readonly mode: "subscribe"
  readonly url: string
  readonly ca: TrustedCa
  /** The application key (MQTT username); "" on a broker without auth. */
  readonly key: string
  readonly clientPrefix: string
  readonly deviceIds: ReadonlyArray<string>
  /** Deliveries of events with this name in the measured window are timed. */
  readonly name: string
  /** BENCH_LATENCY_DUMP: each timed delivery's send time (epoch ms) and latency (ms) go here as JSON. */
  readonly dumpFile?: string | undefined
}

/** Connections that connect and then do nothing. */
export interface IdleSpec {
  readonly mode: "idle"
  readonly url: string
  readonly ca: TrustedCa
  readonly devices: ReadonlyArray<DeviceCredential>
  readonly connections: number
  readonly clientPrefix: string
  /** Connections being set up at once. */
  readonly connectWidth: number
}

export type LoadSpec = PublishSpec | SubscribeSpec | IdleSpec

export interface PublishResult {
  readonly mode: "publish"
  /** Publishes of the measured window (name = `PublishSpec.name`), fences included. */
  readonly sent: number
  /** Of those: QoS 1 PUBACK, QoS 0 covered by an acknowledged fence, CoAP 2.01, HTTP 2xx. */
  readonly acked: number
  /** Refused by back-pressure: CoAP 5.03, HTTP 503. */
  readonly refused: number
  /** Other answers, timeouts and connection errors. */
  readonly errors: number
  /** Sent in the window but neither acknowledged nor refused when the drain limit passed. */
  readonly unsettled: number
  /** The first error seen, for the report. */
  readonly firstError: string | undefined
  readonly disconnects: number
  /** Epoch ms of the window's start and end and of the moment its last publish settled. */
  readonly windowStart: number
  readonly windowEnd: number
  readonly settledAt: number
  /** Publish → acknowledgement, measured-window publishes only (QoS 0: the fences). */
  readonly ackMs: Histogram
  /** Fixed rate: sends that were due but skipped because the device's window was full. */
  readonly skipped: number
}

export interface SubscribeResult {
  readonly mode: "subscribe"
  /** Deliveries of measured-window events. */
  readonly received: number
  /** Publish (the time in `data.t`) → delivery to this subscriber. */
  readonly latencyMs: Histogram
  readonly subscribed: number
}

export interface IdleReady {
  readonly opened: number
  readonly failed: number
  readonly firstError: string | undefined
}

/**
 * Latencies as counts per logarithmic bucket (0.5 % wide), so that load processes can send
 * them compactly and the orchestrator can merge them before taking percentiles.
 */
export type Histogram = Record<string, number>

const BUCKETS_PER_E = 200

export const histogramAdd = (h: Histogram, ms: number): void => {
  const key = String(Math.round(Math.log(Math.max(ms, 0.001)) * BUCKETS_PER_E))
  h[key] = (h[key] ?? 0) + 1
}

export const histogramMerge = (hs: ReadonlyArray<Histogram>): Histogram => {
  const out: Histogram = {}
  for (const h of hs) for (const [key, n] of Object.entries(h)) out[key] = (out[key] ?? 0) + n
  return out
}

export interface Percentiles {
  readonly count: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly max: number
  readonly mean: number
}

export const summarize = (h: Histogram): Percentiles => {
  const buckets = Object.entries(h).map(([key, n]) => ({ ms: Math.exp(Number(key) / BUCKETS_PER_E), n })).sort((a, b) => a.ms - b.ms)
  const count = buckets.reduce((sum, b) => sum + b.n, 0)
  const at = (q: number) => {
    if (count === 0) return Number.NaN
    const rank = Math.min(count, Math.floor(q * count) + 1)
    let seen = 0
    for (const b of buckets) {
      seen += b.n
      if (seen >= rank) return b.ms
    }
    return buckets[buckets.length - 1].ms
  }
  return {
    count,
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: count === 0 ? Number.NaN : buckets[buckets.length - 1].ms,
    mean: count === 0 ? Number.NaN : buckets.reduce((sum, b) => sum + b.ms * b.n, 0) / count
  }
}
