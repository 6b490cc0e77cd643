/**
 * The load of bench:ingest's command case (`bench/ingest-commands.ts`), in its own process: every
 * device connects over MQTT with its own key and subscribes to `devices/{id}/commands/{slug}/run`;
 * then runs are sent at a fixed rate over the devices in turn, and each run's latency is the time
 * from its send to its arrival at the device's subscription (both in this process: one clock).
 *
 * Senders (`via`):
 * - `http`: `POST /v1/commands/run` with the application key, on up to 64 keep-alive connections:
 *   `bench/lean-http.ts` (node:http's scavenges in this process counted as the server's latency;
 *   `BENCH_HTTP_CLIENT=node:http` for it; fetch cost this process twice node:http's CPU);
 * - `mqtt`: the application publishes QoS 1 on `devices/{id}/commands/{slug}`;
 * - `forward`: a bare broker's peer: the same publish straight on the run topic, which the broker forwards.
 *
 * Reads its spec as JSON on stdin; prints `MEASURING` when the measured window starts, `SENT` when
 * it ends (the CPU of that window is the caller's to read) and `RESULT` once the result is in `resultFile`.
 */
import { writeFileSync } from "node:fs"
import { Agent as HttpAgent, request as httpRequest } from "node:http"
import mqtt from "mqtt"
import { LeanHttpClient } from "./lean-http.ts"
import { LeanMqttClient } from "./lean-mqtt.ts"

interface Spec {
  readonly via: "http" | "mqtt" | "forward"
  readonly mqttUrl: string
  readonly httpUrl: string | undefined
  readonly appKey: string
  readonly devices: ReadonlyArray<{ readonly id: string; readonly key: string }>
  readonly slug: string
  readonly rate: number
  readonly warmupMs: number
  readonly durationMs: number
  readonly clientPrefix: string
  /** Where the result goes, as JSON. */
  readonly resultFile: string
  /** BENCH_LATENCY_DUMP: each measured run's send time (epoch ms) and latency (ms) go here as JSON. */
  readonly dumpFile: string | undefined
}

export interface CommandsLoadResult {
  readonly sent: number
  readonly received: number
  readonly errors: number
  readonly firstError: string | undefined
  /** Latencies of the runs sent in the measured window, in ms, sorted. */
  readonly latencyMs: ReadonlyArray<number>
  /** `http`: the time from each send of the measured window to its answer, in ms, sorted. */
  readonly answerMs: ReadonlyArray<number>
}

const readSpec = async (): Promise<Spec> => {
  let text = ""
  for await (const chunk of process.stdin) text += String(chunk)
  return JSON.parse(text) as Spec
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const main = async () => {
  const spec = await readSpec()
  const runTopic = (id: string) => `devices/${id}/commands/${spec.slug}/run`
  /** Send time (performance.now()) by run key, for the runs of the measured window. */
  const pending = new Map<string, number>()
  const latencies: Array<number> = []
  /** [send time, latency] of each measured run, kept only for `dumpFile`. */
  const samples: Array<readonly [number, number]> = []
  let measuring = false
  let sent = 0
  let errors = 0
  let firstError: string | undefined
  const failed = (e: unknown) => {
    errors++
    firstError ??= e instanceof Error ? e.message : String(e)
  }

  // The devices, each on its own connection (bench/lean-mqtt.ts), subscribed to its own run topic.
  const devices: Array<LeanMqttClient> = []
  for (let i = 0; i < spec.devices.length; i += 50) {
    await Promise.all(spec.devices.slice(i, i + 50).map(async (device, j) => {
      const client = await LeanMqttClient.connect(spec.mqttUrl, `${spec.clientPrefix}-d${i + j}`, device.key)
      client.onMessage((_topic, payload) => {
        const run = (JSON.parse(payload.toString()) as { data?: { run?: string } }).data?.run
        const at = run === undefined ? undefined : pending.get(run)
        if (run === undefined || at === undefined) return
        pending.delete(run)
        const latency = performance.now() - at
        latencies.push(latency)
        if (spec.dumpFile !== undefined) samples.push([performance.timeOrigin + at, latency])
      })
      await client.subscribe(runTopic(device.id), 1)
      devices.push(client)
    }))
  }

  const app = spec.via === "http" ? undefined : await mqtt.connectAsync(spec.mqttUrl, {
    clientId: `${spec.clientPrefix}-app`,
    username: spec.appKey === "" ? undefined : spec.appKey,
    password: spec.appKey === "" ? undefined : " ",
    reconnectPeriod: 0
  })

  const httpAgent = new HttpAgent({ keepAlive: true, maxSockets: 64 })
  const lean = spec.via === "http" && process.env.BENCH_HTTP_CLIENT !== "node:http" ? new LeanHttpClient(spec.httpUrl!, 64) : undefined
  const authorization = `authorization: Bearer ${spec.appKey}\r\n`
  const answers: Array<number> = []
  /** A REST run's answer, sent at `at`. */
  const answered = (at: number, status: number | undefined) => {
    if (measuring) answers.push(performance.now() - at)
    if (status !== 200) failed(new Error(`POST /v1/commands/run answered ${status}`))
  }
  const send = (device: { readonly id: string }, run: string) => {
    const body = JSON.stringify({ slug: spec.slug, device: { id: device.id }, data: { run } })
    if (lean !== undefined) {
      const at = performance.now()
      lean.post("/v1/commands/run", authorization, body, (answer) => (answer instanceof Error ? failed(answer) : answered(at, answer.status)))
    } else if (spec.via === "http") {
      const at = performance.now()
      const req = httpRequest(`${spec.httpUrl}/v1/commands/run`, {
        method: "POST",
        agent: httpAgent,
        headers: { authorization: `Bearer ${spec.appKey}`, "content-type": "application/json", "content-length": Buffer.byteLength(body) }
      }, (res) => {
        res.resume()
        res.on("end", () => answered(at, res.statusCode))
      })
      req.on("error", failed)
      req.end(body)
    } else if (spec.via === "mqtt") {
      app!.publishAsync(`devices/${device.id}/commands/${spec.slug}`, JSON.stringify({ run }), { qos: 1 }).catch(failed)
    } else {
      app!.publishAsync(runTopic(device.id), JSON.stringify({ data: { run } }), { qos: 1 }).catch(failed)
    }
  }

  // Paced in 10 ms ticks, each sending what the rate owes since the start.
  const started = performance.now()
  const until = started + spec.warmupMs + spec.durationMs
  let next = 0
  while (performance.now() < until) {
    const now = performance.now()
    if (!measuring && now >= started + spec.warmupMs) {
      measuring = true
      console.log("MEASURING")
    }
    const owed = Math.floor(((now - started) / 1000) * spec.rate)
    for (; next < owed; next++) {
      const device = spec.devices[next % spec.devices.length]
      const run = `r${next}`
      if (measuring) {
        pending.set(run, performance.now())
        sent++
      }
      send(device, run)
    }
    await sleep(10)
  }
  console.log("SENT")
  // What is still on its way: up to 5 s.
  const drainUntil = performance.now() + 5_000
  while (pending.size > 0 && performance.now() < drainUntil) await sleep(20)
  latencies.sort((a, b) => a - b)
  answers.sort((a, b) => a - b)

  const result: CommandsLoadResult = { sent, received: latencies.length, errors, firstError, latencyMs: latencies, answerMs: answers }
  // The result (20,000 numbers) goes to a file: a line that long on stdout, followed by exit, did
  // not always reach the parent.
  writeFileSync(spec.resultFile, JSON.stringify(result))
  if (spec.dumpFile !== undefined) writeFileSync(spec.dumpFile, JSON.stringify({ samples }))
  console.log("RESULT")
  lean?.close()
  for (const device of devices) device.end()
  await app?.endAsync(true).catch(() => undefined)
  process.exit(0)
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
