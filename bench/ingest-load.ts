/**
 * A load process of `bench/ingest.ts`, so the simulated devices never share an event loop
 * with the broker under test. Modes (see `ingest-protocol.ts`):
 *
 * - publish: devices publish events over MQTT (QoS 0 or 1), CoAP or HTTP, either as fast as
 *   their in-flight windows allow (closed loop) or at a fixed rate; counts what was sent and
 *   acknowledged in the measured window.
 * - subscribe: one application connection subscribed to every device's events, timing each
 *   delivery against the send time the publisher put in `data.t`.
 * - idle: connections that connect and then hold still, for the broker's memory per connection.
 *
 * MQTT goes over TLS for an `mqtts:` URL (the lean client and mqtt.js alike), trusting the
 * spec's `ca`.
 *
 * Times are wall-clock milliseconds with sub-millisecond resolution
 * (`performance.timeOrigin + performance.now()`), comparable between processes.
 */
import { Agent as CoapAgent, request as coapRequest } from "coap"
import { createSocket } from "node:dgram"
import { writeFileSync } from "node:fs"
import { Agent as HttpAgent, request as httpRequest } from "node:http"
import { createInterface } from "node:readline"
import mqtt, { type IClientOptions, type MqttClient } from "mqtt"
import { LeanMqttClient, OK, type Outcome, REFUSED } from "./lean-mqtt.ts"
import {
  type DeviceCredential,
  type IdleReady,
  type IdleSpec,
  type LoadSpec,
  type Histogram,
  histogramAdd,
  type PublishResult,
  type PublishSpec,
  READY,
  type SubscribeResult,
  type SubscribeSpec,
  type TrustedCa
} from "./ingest-protocol.ts"

const now = () => performance.timeOrigin + performance.now()
const sleep = (ms: number) => new Promise<void>((resolveSleep) => setTimeout(resolveSleep, Math.max(0, ms)))
const message = (error: unknown) => (error instanceof Error ? error.message : String(error))

// ---------------------------------------------------------------------------------------
// stdin: the spec, then `go <t0>` / `close`

const lines = createInterface({ input: process.stdin })
const waiting: Array<(line: string | undefined) => void> = []
const queued: Array<string | undefined> = []
lines.on("line", (line) => {
  const next = waiting.shift()
  if (next) next(line)
  else queued.push(line)
})
lines.on("close", () => {
  for (const next of waiting.splice(0)) next(undefined)
  queued.push(undefined)
})
/** The next line of stdin; undefined once it has ended. */
const nextLine = (): Promise<string | undefined> =>
  queued.length > 0 ? Promise.resolve(queued.shift()) : new Promise((resolveLine) => waiting.push(resolveLine))

const waitForGo = async (): Promise<number> => {
  for (;;) {
    const line = await nextLine()
    if (line === undefined) throw new Error("stdin ended before go")
    const match = /^go (\d+(?:\.\d+)?)$/.exec(line)
    if (match) return Number(match[1])
  }
}

// ---------------------------------------------------------------------------------------
// MQTT connections

/** `ca`: for an `mqtts:` URL, the PEM certificate the broker's must chain to (see `TrustedCa`). */
const connectMqtt = (url: string, clientId: string, key: string, ca: TrustedCa): Promise<MqttClient> =>
  new Promise((resolveClient, reject) => {
    const options: IClientOptions = {
      clientId,
      ...(ca === undefined ? {} : { ca }),
      protocolVersion: 4,
      clean: true,
      keepalive: 60,
      reconnectPeriod: 0,
      connectTimeout: 30_000,
      ...(key === "" ? {} : { username: key, password: " " })
    }
    const client = mqtt.connect(url, options)
    const fail = (error: Error) => {
      client.end(true)
      reject(error)
    }
    client.once("connect", () => {
      client.off("error", fail)
      client.on("error", () => {})
      resolveClient(client)
    })
    client.once("error", fail)
    client.once("close", () => {
      if (!client.connected) fail(new Error("closed before CONNACK"))
    })
  })

/** Connects `count` clients, `width` at a time; connection `i` uses `devices[i % devices.length]`. */
const connectAll = async <C>(
  connect: (clientId: string, key: string) => Promise<C>,
  devices: ReadonlyArray<DeviceCredential>,
  count: number,
  prefix: string,
  width: number
): Promise<{ clients: Array<C | undefined>; failed: number; firstError: string | undefined }> => {
  const clients = new Array<C | undefined>(count)
  let failed = 0
  let firstError: string | undefined
  let next = 0
  const worker = async () => {
    while (next < count) {
      const i = next++
      try {
        clients[i] = await connect(`${prefix}-${i}`, devices[i % devices.length].key)
      } catch (error) {
        failed += 1
        firstError ??= message(error)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, count) }, worker))
  return { clients, failed, firstError }
}

/** A publishing device: `LeanMqttClient`, or mqtt.js with `BENCH_LOAD_CLIENT=mqtt.js` (for comparison). */
interface Publisher {
  readonly connected: boolean
  publish(topic: string, payload: string, qos: 0 | 1): Promise<Outcome>
  onClose(handler: () => void): void
  end(): void
}

/** mqtt.js as a `Publisher`: resolves when it has handed the packet on (QoS 0: written or drained; QoS 1: PUBACK). */
const mqttJsPublisher = (client: MqttClient): Publisher => ({
  get connected() {
    return client.connected
  },
  publish: (topic, payload, qos) =>
    new Promise((resolvePublish) => {
      if (!client.connected) return resolvePublish({ kind: "error", error: "not connected" })
      client.publish(topic, payload, { qos }, (error) => resolvePublish(error ? { kind: "error", error: error.message } : OK))
    }),
  onClose: (handler) => void client.once("close", handler),
  end: () => void client.end(true)
})

const connectPublisher = (url: string, ca: TrustedCa) => (clientId: string, key: string): Promise<Publisher> =>
  process.env.BENCH_LOAD_CLIENT === "mqtt.js"
    ? connectMqtt(url, clientId, key, ca).then(mqttJsPublisher)
    : LeanMqttClient.connect(url, clientId, key, ca === undefined ? {} : { ca })

// ---------------------------------------------------------------------------------------
// Publishing

const payloadOf = (t: number, seq: number) => `{"t":${t.toFixed(3)},"s":${seq}}`

const publish = async (spec: PublishSpec) => {
  const transport = spec.transport
  let disconnects = 0

  // Set up every device's channel before printing ready.
  let clients: Array<Publisher> = []
  let coapAgent: CoapAgent | undefined
  let httpAgent: HttpAgent | undefined
  if (transport.kind === "mqtt") {
    const connected = await connectAll(connectPublisher(transport.url, transport.ca), spec.devices, spec.devices.length, spec.clientPrefix, 100)
    if (connected.failed > 0) throw new Error(`${connected.failed} of ${spec.devices.length} MQTT connections failed: ${connected.firstError}`)
    clients = connected.clients.filter((c): c is Publisher => c !== undefined)
    for (const client of clients) {
      client.onClose(() => {
        disconnects += 1
        // Fails what waits for a PUBACK instead of keeping it for a reconnect that never comes.
        client.end()
      })
    }
  } else if (transport.kind === "coap") {
    // One agent and one socket for the process: the agent closes a socket it made itself
    // whenever nothing is in flight, and a new port would be a new endpoint to the server.
    coapAgent = new CoapAgent({ socket: createSocket({ type: "udp4", recvBufferSize: 4 * 1024 * 1024 }) })
  } else {
    httpAgent = new HttpAgent({ keepAlive: true, maxSockets: spec.window })
  }
  process.stdout.write(`${READY} {}\n`)

  const t0 = await waitForGo()
  const windowStart = t0 + spec.warmupMs
  const windowEnd = windowStart + spec.durationMs

  let sent = 0
  let acked = 0
  let refused = 0
  let errors = 0
  let skipped = 0
  let firstError: string | undefined
  const ackLatencies: Histogram = {}
  let seq = 0

  /** Accounts for one settled send of the measured window. */
  const settle = (outcome: Outcome, startedAt: number, covers = 1) => {
    if (outcome.kind === "ok") {
      acked += covers
      histogramAdd(ackLatencies, now() - startedAt)
    } else if (outcome.kind === "refused") {
      refused += covers
    } else {
      errors += covers
      firstError ??= outcome.error
    }
  }

  const coapSend = (device: DeviceCredential, name: string, t: number): Promise<Outcome> =>
    new Promise((resolveSend) => {
      if (transport.kind !== "coap" || coapAgent === undefined) return resolveSend({ kind: "error", error: "no CoAP agent" })
      const req = coapRequest({
        hostname: transport.host,
        port: transport.port,
        method: "POST",
        pathname: "/events",
        confirmable: true,
        agent: coapAgent
      })
      req.setOption("Content-Format", "application/json")
      let done = false
      const finish = (outcome: Outcome) => {
        if (done) return
        done = true
        resolveSend(outcome)
      }
      req.on("response", (res) => {
        res.resume()
        finish(res.code === "2.01" ? OK : res.code === "5.03" ? REFUSED : { kind: "error", error: `CoAP ${res.code} ${res.payload.toString()}` })
      })
      req.on("timeout", (error: Error) => finish({ kind: "error", error: `CoAP timeout: ${error.message}` }))
      req.on("error", (error: Error) => finish({ kind: "error", error: `CoAP: ${error.message}` }))
      req.end(Buffer.from(`{"accessToken":"${device.key}","name":"${name}","data":${payloadOf(t, seq++)}}`))
    })

  const httpSend = (device: DeviceCredential, name: string, t: number): Promise<Outcome> =>
    new Promise((resolveSend) => {
      if (transport.kind !== "http") return resolveSend({ kind: "error", error: "not HTTP" })
      const body = `{"name":"${name}","data":${payloadOf(t, seq++)}}`
      const req = httpRequest(
        `${transport.url}/v1/events`,
        {
          method: "POST",
          agent: httpAgent,
          headers: { authorization: `Bearer ${device.key}`, "content-type": "application/json", "content-length": Buffer.byteLength(body) }
        },
        (res) => {
          const status = res.statusCode ?? 0
          const chunks: Array<Buffer> = []
          res.on("data", (chunk: Buffer) => {
            if (status >= 300) chunks.push(chunk)
          })
          res.on("end", () => {
            resolveSend(
              status >= 200 && status < 300 ? OK : status === 503 ? REFUSED : { kind: "error", error: `HTTP ${status} ${Buffer.concat(chunks).toString().slice(0, 200)}` }
            )
          })
          res.on("error", (error) => resolveSend({ kind: "error", error: `HTTP: ${error.message}` }))
        }
      )
      req.on("error", (error) => resolveSend({ kind: "error", error: `HTTP: ${error.message}` }))
      req.end(body)
    })

  const topic = (device: DeviceCredential, name: string) => `devices/${device.id}/events/${name}`
  const mqttBody = (t: number) => `{"data":${payloadOf(t, seq++)}}`

  /** Sends one event of `device` (index `i`) over the transport. */
  const sendOne = (i: number, name: string, t: number, qos: 0 | 1): Promise<Outcome> => {
    const device = spec.devices[i]
    if (transport.kind === "mqtt") return clients[i].publish(topic(device, name), mqttBody(t), qos)
    if (transport.kind === "coap") return coapSend(device, name, t)
    return httpSend(device, name, t)
  }

  /** Only publishes of the measured window carry the case's name; the others are not counted. */
  const phaseName = (t: number) => (t >= windowStart && t < windowEnd ? spec.name : spec.warmupName)

  await sleep(t0 - Date.now())

  /** Closed loop: one slot keeps one publish in flight, on and on, until the window ends. */
  const slot = async (i: number, qos: 0 | 1) => {
    for (;;) {
      const t = now()
      if (t >= windowEnd) return
      const measured = t >= windowStart
      if (measured) sent += 1
      const outcome = await sendOne(i, phaseName(t), t, qos)
      if (measured) settle(outcome, t)
      if (outcome.kind === "refused") await sleep(100)
      else if (outcome.kind === "error") {
        if (transport.kind === "mqtt" && !clients[i].connected) return
        await sleep(100)
      }
    }
  }

  /** Closed loop at QoS 0: `fenceEvery` QoS 0 publishes, then a QoS 1 one whose PUBACK vouches for them. */
  const fencedConnection = async (i: number) => {
    const fences: Array<Promise<void>> = []
    let sinceFence = 0
    let uncovered = 0
    const fence = (t: number) => {
      const measured = t >= windowStart && t < windowEnd
      const covers = uncovered + (measured ? 1 : 0)
      if (measured) sent += 1
      uncovered = 0
      sinceFence = 0
      fences.push(sendOne(i, phaseName(t), t, 1).then((outcome) => {
        if (covers > 0) settle(outcome, t, covers)
      }))
    }
    for (;;) {
      const t = now()
      if (t >= windowEnd) break
      const measured = t >= windowStart
      const outcome = await sendOne(i, phaseName(t), t, 0)
      if (outcome.kind === "error") {
        if (measured) {
          sent += 1
          settle(outcome, t)
        }
        if (!clients[i].connected) break
        await sleep(100)
        continue
      }
      if (measured) {
        sent += 1
        uncovered += 1
      }
      sinceFence += 1
      if (sinceFence >= spec.fenceEvery) {
        fence(now())
        if (fences.length >= spec.fencesInFlight) await fences.shift()
      }
    }
    // The last QoS 0 publishes need a fence of their own (sent after the window, so not counted itself).
    if (uncovered > 0 && clients[i].connected) fence(now())
    else if (uncovered > 0) errors += uncovered
    await Promise.all(fences)
  }

  /** Fixed rate: every millisecond, what is due goes out over the devices in turn. */
  const fixedRate = (rate: number, qos: 0 | 1) =>
    new Promise<void>((resolveRun) => {
      const inFlight = new Array<number>(spec.devices.length).fill(0)
      const pending = new Set<Promise<void>>()
      let issued = 0
      let next = 0
      const timer = setInterval(() => {
        const t = now()
        if (t >= windowEnd) {
          clearInterval(timer)
          void Promise.all(pending).then(() => resolveRun())
          return
        }
        const due = Math.floor((t - t0) * rate / 1000) - issued
        for (let k = 0; k < due; k++) {
          issued += 1
          const i = next
          next = (next + 1) % spec.devices.length
          const measured = t >= windowStart
          if (inFlight[i] >= spec.window) {
            if (measured) skipped += 1
            continue
          }
          if (measured) sent += 1
          inFlight[i] += 1
          const started = now()
          const p = sendOne(i, phaseName(t), started, qos).then((outcome) => {
            inFlight[i] -= 1
            if (measured) settle(outcome, started)
            pending.delete(p)
          })
          pending.add(p)
        }
      }, 1)
    })

  let run: Promise<void>
  if (spec.rate !== undefined) {
    run = fixedRate(spec.rate, transport.kind === "mqtt" ? transport.qos : 1)
  } else if (transport.kind === "mqtt" && transport.qos === 0) {
    run = Promise.all(spec.devices.map((_, i) => fencedConnection(i))).then(() => undefined)
  } else if (transport.kind === "http") {
    // HTTP: `window` requests in flight, each as the next device in turn.
    let next = 0
    const worker = async () => {
      for (;;) {
        const t = now()
        if (t >= windowEnd) return
        const i = next
        next = (next + 1) % spec.devices.length
        const measured = t >= windowStart
        if (measured) sent += 1
        const outcome = await sendOne(i, phaseName(t), t, 1)
        if (measured) settle(outcome, t)
        if (outcome.kind !== "ok") await sleep(100)
      }
    }
    run = Promise.all(Array.from({ length: spec.window }, worker)).then(() => undefined)
  } else {
    const qos = transport.kind === "mqtt" ? transport.qos : 1
    run = Promise.all(spec.devices.flatMap((_, i) => Array.from({ length: spec.window }, () => slot(i, qos)))).then(() => undefined)
  }

  await sleep(windowEnd - Date.now())
  let drained = false
  await Promise.race([run.then(() => (drained = true)), sleep(windowEnd + spec.drainLimitMs - Date.now())])
  const settledAt = drained ? now() : Number.NaN
  const result: PublishResult = {
    mode: "publish",
    sent,
    acked,
    refused,
    errors,
    unsettled: sent - acked - refused - errors,
    firstError,
    disconnects,
    windowStart,
    windowEnd,
    settledAt,
    ackMs: ackLatencies,
    skipped
  }
  process.stdout.write(`${JSON.stringify(result)}\n`)
  for (const client of clients) client.end()
  httpAgent?.destroy()
  coapAgent?.close()
}

// ---------------------------------------------------------------------------------------
// Subscribing

const subscribe = async (spec: SubscribeSpec) => {
  const client = await connectMqtt(spec.url, `${spec.clientPrefix}-sub`, spec.key, spec.ca)
  let subscribed = 0
  for (let i = 0; i < spec.deviceIds.length; i += 100) {
    const topics = spec.deviceIds.slice(i, i + 100).map((id) => `devices/${id}/events/+`)
    const granted = await client.subscribeAsync(topics, { qos: 0 })
    subscribed += granted.filter((g) => g.qos !== 128).length
  }
  if (subscribed !== spec.deviceIds.length) throw new Error(`subscriber: ${spec.deviceIds.length - subscribed} subscriptions refused`)
  process.stdout.write(`${READY} {}\n`)

  const t0 = await waitForGo()
  const windowStart = t0 + spec.warmupMs
  const windowEnd = windowStart + spec.durationMs
  const suffix = `/events/${spec.name}`
  const latencies: Histogram = {}
  /** [send time, latency] of each timed delivery, kept only for BENCH_LATENCY_DUMP. */
  const samples: Array<readonly [number, number]> = []
  let received = 0
  client.on("message", (topic, payload) => {
    const at = now()
    if (!topic.endsWith(suffix)) return
    try {
      const value: unknown = JSON.parse(payload.toString())
      const data = typeof value === "object" && value !== null && "data" in value ? value.data : undefined
      const t = typeof data === "object" && data !== null && "t" in data && typeof data.t === "number" ? data.t : undefined
      if (t !== undefined) {
        received += 1
        histogramAdd(latencies, at - t)
        if (spec.dumpFile !== undefined) samples.push([t, at - t])
      }
    } catch {
      // Not one of ours.
    }
  })
  // Deliveries still on their way after the window: as long as the publishers may drain.
  await sleep(windowEnd + Math.min(spec.drainLimitMs, 5_000) - Date.now())
  const result: SubscribeResult = { mode: "subscribe", received, latencyMs: latencies, subscribed }
  if (spec.dumpFile !== undefined) writeFileSync(spec.dumpFile, JSON.stringify({ samples }))
  process.stdout.write(`${JSON.stringify(result)}\n`)
  client.end(true)
}

// ---------------------------------------------------------------------------------------
// Idle connections

const idle = async (spec: IdleSpec) => {
  const connected = await connectAll((clientId, key) => connectMqtt(spec.url, clientId, key, spec.ca), spec.devices, spec.connections, spec.clientPrefix, spec.connectWidth)
  const ready: IdleReady = { opened: spec.connections - connected.failed, failed: connected.failed, firstError: connected.firstError }
  process.stdout.write(`${READY} ${JSON.stringify(ready)}\n`)
  for (;;) {
    const line = await nextLine()
    if (line === undefined || line === "close") break
  }
  for (const client of connected.clients) client?.end(true)
}

// ---------------------------------------------------------------------------------------

const main = async () => {
  const first = await nextLine()
  if (first === undefined) throw new Error("no spec on stdin")
  const spec = JSON.parse(first) as LoadSpec
  if (spec.mode === "publish") await publish(spec)
  else if (spec.mode === "subscribe") await subscribe(spec)
  else await idle(spec)
}

process.once("SIGTERM", () => process.exit(0))
main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error instanceof Error ? error.stack ?? error.message : String(error))
    process.exit(1)
  }
)
