/**
 * Generates inputs with fast-check and sends each to its protocol's sender, recording every
 * answer in a `Tally`. Shared by `npm run fuzz` (sockets to a server process) and the sample
 * in `npm test` (in process).
 */
import fc from "fast-check"
import {
  type Build,
  coapInput,
  type CoapInput,
  laneKey,
  MQTT_LANES,
  type MqttInput,
  mqttInput,
  type MqttLane,
  type PayloadOptions,
  restInput,
  type RestInput,
  type Targets
} from "./generators/index.ts"
import type { CoapSender } from "./senders/coap.ts"
import { MqttSession, type OpenStream, sendMqtt } from "./senders/mqtt.ts"
import { drain, Queue } from "./senders/queue.ts"
import { type HttpTransport, sendRest } from "./senders/rest.ts"
import { show, type Tally } from "./tally.ts"

export interface Transports {
  readonly openMqtt: OpenStream
  readonly coap: CoapSender
  readonly http: HttpTransport
}

export interface EngineOptions {
  readonly count: number
  readonly seed: number
  readonly payload: PayloadOptions
  /** Relative shares of the three protocols. */
  readonly mix: { readonly mqtt: number; readonly coap: number; readonly rest: number }
  /**
   * In-flight inputs: per MQTT session lane, mutated-packet sessions, raw connections, CoAP
   * (valid and invalid), odd CoAP datagrams, REST. The odd ones mostly wait for a timeout (a
   * malformed datagram is dropped silently, a wrong length swallows the PINGREQ): many in flight
   * cost nothing, and too few would hold every other lane back.
   */
  readonly width: {
    readonly mqtt: number
    readonly odd: number
    readonly raw: number
    readonly coap: number
    readonly coapOdd: number
    readonly rest: number
  }
  /** How long an answer is awaited (raw MQTT connections and odd CoAP datagrams: `shortTimeoutMs`). */
  readonly timeoutMs: number
  readonly shortTimeoutMs: number
  /** Awaited before each send: holds the senders while the server is restarted. */
  readonly gate?: () => Promise<void>
}

type Input =
  | { readonly protocol: "mqtt"; readonly build: Build<MqttInput> }
  | { readonly protocol: "coap"; readonly build: Build<CoapInput> }
  | { readonly protocol: "rest"; readonly build: Build<RestInput> }

export const inputArbitrary = (options: EngineOptions): fc.Arbitrary<Input> =>
  fc.oneof(
    { weight: options.mix.mqtt, arbitrary: mqttInput(options.payload).map((build): Input => ({ protocol: "mqtt", build })) },
    { weight: options.mix.coap, arbitrary: coapInput(options.payload).map((build): Input => ({ protocol: "coap", build })) },
    { weight: options.mix.rest, arbitrary: restInput(options.payload).map((build): Input => ({ protocol: "rest", build })) }
  )

const BATCH = 500

/** The session lanes and their counters, for the report. */
export interface EngineRun {
  readonly sessions: Map<string, MqttSession>
  readonly done: Promise<void>
}

/** Sends `options.count` inputs, numbered from 0, to `targets` through `transports`. */
export const runInputs = (transports: Transports, targets: Targets, options: EngineOptions, tally: Tally): EngineRun => {
  const gate = options.gate ?? (() => Promise.resolve())
  const sessions = new Map<string, MqttSession>()
  const session = (name: string, lane: MqttLane) => {
    let s = sessions.get(name)
    if (s === undefined) {
      s = new MqttSession(name, transports.openMqtt, laneKey(lane, targets), options.timeoutMs, options.shortTimeoutMs)
      sessions.set(name, s)
    }
    return s
  }
  const capacity = 4 * Math.max(options.width.mqtt, options.width.coap, options.width.rest)
  const laneQueues = new Map<MqttLane, Queue<{ seq: number; input: MqttInput }>>(
    MQTT_LANES.map((lane) => [lane, new Queue(lane === "raw" ? 4 * options.width.raw : lane === "odd" ? 4 * options.width.odd : capacity)])
  )
  const coapQueue = new Queue<{ seq: number; input: CoapInput }>(capacity)
  const coapOddQueue = new Queue<{ seq: number; input: CoapInput }>(4 * options.width.coapOdd)
  const restQueue = new Queue<{ seq: number; input: RestInput }>(capacity)

  const workers: Array<Promise<void>> = []
  for (const lane of MQTT_LANES) {
    const queue = laneQueues.get(lane)!
    const width = lane === "odd" ? options.width.odd : lane === "raw" ? options.width.raw : options.width.mqtt
    for (let i = 0; i < width; i++) {
      // Session lanes pipeline on one session; each odd worker probes on a session of its own; raw ones need none.
      const s = lane === "raw" ? undefined : session(lane === "odd" ? `odd-${i}` : lane, lane)
      workers.push(drain(queue, 1, async ({ seq, input }) => {
        await gate()
        const answer = await sendMqtt(s, transports.openMqtt, input, options.shortTimeoutMs)
        tally.record("mqtt", seq, input, answer.outcome, answer.verdict, () => show({ seq, ...input }))
      }))
    }
  }
  const coapWork = async ({ seq, input }: { seq: number; input: CoapInput }) => {
    await gate()
    const answer = await transports.coap.send(input, input.marker === "odd" ? options.shortTimeoutMs : options.timeoutMs)
    tally.record("coap", seq, input, answer.outcome, answer.verdict, () => show({ seq, ...input, datagram: input.datagram(0, Buffer.alloc(4)) }))
  }
  workers.push(drain(coapQueue, options.width.coap, coapWork), drain(coapOddQueue, options.width.coapOdd, coapWork))
  workers.push(drain(restQueue, options.width.rest, async ({ seq, input }) => {
    await gate()
    const answer = await sendRest(transports.http, input, options.timeoutMs)
    tally.record("rest", seq, input, answer.outcome, answer.verdict, () => show({ seq, ...input }))
  }))

  const produce = async () => {
    const arbitrary = inputArbitrary(options)
    for (let start = 0; start < options.count; start += BATCH) {
      const batch = fc.sample(arbitrary, { seed: options.seed + start, numRuns: Math.min(BATCH, options.count - start) })
      for (let i = 0; i < batch.length; i++) {
        const seq = start + i
        const item = batch[i]
        if (item.protocol === "mqtt") {
          const input = item.build(targets, seq)
          await laneQueues.get(input.lane)!.put({ seq, input })
        } else if (item.protocol === "coap") {
          const input = item.build(targets, seq)
          await (input.marker === "odd" ? coapOddQueue : coapQueue).put({ seq, input })
        }
        else await restQueue.put({ seq, input: item.build(targets, seq) })
      }
    }
    for (const queue of laneQueues.values()) queue.close()
    coapQueue.close()
    coapOddQueue.close()
    restQueue.close()
  }
  const done = Promise.all([produce(), ...workers]).then(() => undefined)
  return { sessions, done }
}

/** The input numbered `seq` of a run with these options, generated again (for the report). */
export const replayInput = (targets: Targets, options: EngineOptions, seq: number): string => {
  const start = seq - (seq % BATCH)
  const batch = fc.sample(inputArbitrary(options), { seed: options.seed + start, numRuns: Math.min(BATCH, options.count - start) })
  const item = batch[seq - start]
  const input = item.build(targets, seq)
  return show({ protocol: item.protocol, seq, ...input, ...("datagram" in input ? { datagram: input.datagram(0, Buffer.alloc(4)) } : {}) })
}
