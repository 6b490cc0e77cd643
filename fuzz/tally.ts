import type { Marker, Meta } from "./generators/index.ts"

export type Protocol = "mqtt" | "coap" | "rest"

/**
 * What an answer means for the oracle:
 * - `acked`: HTTP 2xx, CoAP 2.xx, MQTT PUBACK/SUBACK/PINGRESP;
 * - `refused`: HTTP 4xx, CoAP 4.xx, a CONNACK refusal, a connection closed by the server;
 * - `failed`: a server error (HTTP 5xx but 503, CoAP 5.xx but 5.03 and 5.05): must not happen;
 * - `busy`: 503 / 5.03 (the store is behind, answered with Retry-After / Max-Age);
 * - `lost`: no answer (timeout, reset): the row may or may not exist;
 * - `none`: nothing to expect (MQTT QoS 0).
 */
export type Verdict = "acked" | "refused" | "failed" | "busy" | "lost" | "none"
const VERDICTS: ReadonlyArray<Verdict> = ["none", "acked", "refused", "failed", "busy", "lost"]
const MARKERS: ReadonlyArray<Marker> = ["valid", "invalid", "odd"]
const PROTOCOLS: ReadonlyArray<Protocol> = ["mqtt", "coap", "rest"]

export interface Sample {
  readonly protocol: Protocol
  readonly outcome: string
  readonly input: string
}

/** Counts of every answer, and per input what it got (indexed by sequence number), for the stored-row oracle. */
export class Tally {
  readonly counts = new Map<string, number>()
  readonly sent: Record<Protocol, number> = { mqtt: 0, coap: 0, rest: 0 }
  readonly byMarker = new Map<string, number>()
  /** Per sequence number: protocol index + 1 (0: not sent). */
  readonly protocolOf: Uint8Array
  readonly markerOf: Uint8Array
  readonly verdictOf: Uint8Array
  readonly taggedOf: Uint8Array
  /** Inputs worth showing: failures, and valid inputs that were refused. */
  readonly samples: Array<Sample> = []
  private readonly sampled = new Map<string, number>()

  constructor(readonly capacity: number) {
    this.protocolOf = new Uint8Array(capacity)
    this.markerOf = new Uint8Array(capacity)
    this.verdictOf = new Uint8Array(capacity)
    this.taggedOf = new Uint8Array(capacity)
  }

  /** One input's answer; `describe` renders it for a sample, only when one is kept. */
  record(protocol: Protocol, seq: number, meta: Meta, outcome: string, verdict: Verdict, describe: () => string): void {
    this.sent[protocol] += 1
    const key = `${protocol}\t${meta.marker}${meta.invalid === undefined ? "" : `/${meta.invalid}`}\t${outcome}`
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1)
    const markerKey = `${protocol}\t${meta.marker}${meta.invalid === undefined ? "" : `/${meta.invalid}`}\t${meta.what}`
    this.byMarker.set(markerKey, (this.byMarker.get(markerKey) ?? 0) + 1)
    if (seq < this.capacity) {
      this.protocolOf[seq] = PROTOCOLS.indexOf(protocol) + 1
      this.markerOf[seq] = MARKERS.indexOf(meta.marker)
      this.verdictOf[seq] = VERDICTS.indexOf(verdict)
      this.taggedOf[seq] = meta.tagged ? 1 : 0
    }
    const why = verdict === "failed"
      ? ""
      : meta.marker === "valid" && verdict === "refused"
      ? "valid input refused: "
      // MQTT acknowledges a refused publish too (README "MQTT topics").
      : meta.invalid === "type" && verdict === "acked" && protocol !== "mqtt"
      ? "input breaking a schema rule accepted: "
      : /not JSON|without error.code/.test(outcome)
      ? "error answer that is not the JSON error shape: "
      : undefined
    if (why !== undefined) this.sample({ protocol, outcome: `${why}${outcome}`, input: describe() })
  }

  /** Keeps the first few inputs of each kind of outcome. */
  sample(sample: Sample): void {
    const key = `${sample.protocol}\t${sample.outcome}`
    const n = this.sampled.get(key) ?? 0
    if (n >= 3) return
    this.sampled.set(key, n + 1)
    this.samples.push({ ...sample, input: sample.input.length > 600 ? `${sample.input.slice(0, 600)}… (${sample.input.length} chars)` : sample.input })
  }

  verdict(seq: number): Verdict {
    return VERDICTS[this.verdictOf[seq]]
  }

  marker(seq: number): Marker {
    return MARKERS[this.markerOf[seq]]
  }

  protocol(seq: number): Protocol | undefined {
    return this.protocolOf[seq] === 0 ? undefined : PROTOCOLS[this.protocolOf[seq] - 1]
  }

  /** Inputs answered with this verdict. */
  total(verdict: Verdict, protocol?: Protocol): number {
    let n = 0
    const v = VERDICTS.indexOf(verdict)
    const p = protocol === undefined ? -1 : PROTOCOLS.indexOf(protocol) + 1
    for (let i = 0; i < this.capacity; i++) if (this.verdictOf[i] === v && this.protocolOf[i] !== 0 && (p === -1 || this.protocolOf[i] === p)) n++
    return n
  }

  get inputs(): number {
    return this.sent.mqtt + this.sent.coap + this.sent.rest
  }
}

const isBufferJson = (v: unknown): v is { type: "Buffer"; data: Array<number> } =>
  typeof v === "object" && v !== null && "type" in v && v.type === "Buffer" && "data" in v && Array.isArray(v.data)

/** A short rendering of an input for the report (Buffers as hex; JSON escapes control characters). */
export const show = (value: unknown): string =>
  JSON.stringify(value, (_k, v: unknown) =>
    isBufferJson(v) ? `<${v.data.length} bytes ${Buffer.from(v.data.slice(0, 48)).toString("hex")}>` : typeof v === "function" ? undefined : v) ?? String(value)
