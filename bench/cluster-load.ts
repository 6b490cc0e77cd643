/**
 * The MQTT load of `npm run bench:cluster` (bench/cluster.ts): numbered QoS 1 events from
 * mqtt.js clients, each stream (one device) either pinned to one server process or alternating
 * between two, and the devices that fall silent at chosen times (REST).
 *
 * Every client lists all the servers (mqtt.js `servers`), its home first: it connects to its
 * home, and after a connection is lost it reconnects to the next one, re-sending what it had
 * unacknowledged (QoS 1). So the publishers of a killed process move to the survivor.
 */
import mqtt, { type MqttClient } from "mqtt"

export const EVENT_NAME = "cluster"

export interface Device {
  readonly id: string
  readonly secretKey: string
}

export interface ServerAddress {
  readonly name: string
  readonly host: string
  readonly mqttPort: number
  readonly httpUrl: string
}

/** One event, keyed `${stream}:${sequence}`. */
export interface Sent {
  readonly sentAt: number
  /** The process the client was connected to when it published (it may have been re-sent elsewhere). */
  readonly via: string
  ackedAt?: number
  failed?: string
}

export interface Traffic {
  readonly sent: Map<string, Sent>
  /** Client connections lost: when, and from which process. */
  readonly closes: Array<{ readonly at: number; readonly from: string }>
  /** Reconnections: when, and to which process. */
  readonly reconnects: Array<{ readonly at: number; readonly to: string }>
  heldBack: number
}

export const newTraffic = (): Traffic => ({ sent: new Map(), closes: [], reconnects: [], heldBack: 0 })

export const key = (stream: number, sequence: number) => `${stream}:${sequence}`

/** A stream: `homes` has one server (pinned) or two (alternating publishes between a client on each). */
export interface Stream {
  readonly p: number
  readonly device: Device
  readonly homes: ReadonlyArray<string>
}

const connected = (client: MqttClient, what: string, timeoutMs: number) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no CONNACK within ${timeoutMs} ms`)), timeoutMs)
    client.once("connect", () => {
      clearTimeout(timer)
      resolve()
    })
  })

const connectClient = async (servers: ReadonlyArray<ServerAddress>, home: string, device: Device, clientId: string, traffic: Traffic) => {
  const ordered = [...servers.filter((s) => s.name === home), ...servers.filter((s) => s.name !== home)]
  const byPort = new Map(servers.map((s) => [s.mqttPort, s.name]))
  const client = mqtt.connect({
    protocol: "mqtt",
    servers: ordered.map((s) => ({ host: s.host, port: s.mqttPort })),
    username: device.secretKey,
    password: " ",
    reconnectPeriod: 200,
    connectTimeout: 5_000,
    clientId
  })
  const state = { client, at: home, connects: 0 }
  client.on("error", () => {})
  client.on("connect", () => {
    // mqtt.js writes the server it picked into its options.
    state.at = byPort.get(Number((client.options as { port?: number }).port)) ?? "?"
    if (state.connects++ > 0) traffic.reconnects.push({ at: Date.now(), to: state.at })
  })
  client.on("close", () => traffic.closes.push({ at: Date.now(), from: state.at }))
  await connected(client, clientId, 30_000)
  return state
}

/**
 * Publishes `ratePerSecond` events over all streams together, paced on a 10 ms tick, at most
 * `window` unacknowledged per stream (a stream held back longer skips sends: counted).
 */
export const startLoad = async (input: {
  readonly servers: ReadonlyArray<ServerAddress>
  readonly streams: ReadonlyArray<Stream>
  readonly ratePerSecond: number
  readonly window: number
  readonly traffic: Traffic
  readonly label: string
}) => {
  const { streams, traffic } = input
  const clients = await Promise.all(streams.map((stream) =>
    Promise.all(stream.homes.map((home, c) => connectClient(input.servers, home, stream.device, `${input.label}-${stream.p}-${c}`, traffic)))
  ))
  const perStream = input.ratePerSecond / streams.length
  const next = streams.map(() => 0)
  const unacked = streams.map(() => 0)
  const started = Date.now()
  const publish = (i: number) => {
    const { p, device } = streams[i]
    const s = next[i]++
    const pair = clients[i]
    const { client, at } = pair[s % pair.length]
    const sent: Sent = { sentAt: Date.now(), via: at }
    traffic.sent.set(key(p, s), sent)
    unacked[i] += 1
    client.publish(`devices/${device.id}/events/${EVENT_NAME}`, JSON.stringify({ data: { p, s } }), { qos: 1 }, (error) => {
      unacked[i] -= 1
      if (error) sent.failed = error.message
      else sent.ackedAt = Date.now()
    })
  }
  const tick = setInterval(() => {
    const due = Math.floor((Date.now() - started) * perStream / 1000)
    for (let i = 0; i < streams.length; i++) {
      while (next[i] < due) {
        if (unacked[i] >= input.window) {
          traffic.heldBack += due - next[i]
          next[i] = due
          break
        }
        publish(i)
      }
    }
  }, 10)
  return {
    /** Stops sending; waits (at most `drainMs`) for every send to be acknowledged, then disconnects; returns how many were not. */
    stop: async (drainMs: number) => {
      clearInterval(tick)
      const until = Date.now() + drainMs
      while (unacked.some((n) => n > 0) && Date.now() < until) await new Promise((r) => setTimeout(r, 50))
      await Promise.all(clients.flat().map((c) => c.client.endAsync(true)))
      return unacked.reduce((a, b) => a + b, 0)
    }
  }
}

/** Events PUBACKed between `from` and `to`, per process they were published to. */
export const ackedIn = (traffic: Traffic, from: number, to: number): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const sent of traffic.sent.values()) {
    if (sent.ackedAt !== undefined && sent.ackedAt >= from && sent.ackedAt < to) counts.set(sent.via, (counts.get(sent.via) ?? 0) + 1)
  }
  return counts
}

/** One REST request with a key; the status (0 when it did not answer) and the body. */
export const call = async (baseUrl: string, key: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> => {
  try {
    const res = await fetch(`${baseUrl}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(5_000)
    })
    const text = await res.text()
    return { status: res.status, body: text === "" ? undefined : JSON.parse(text) }
  } catch {
    return { status: 0, body: undefined }
  }
}
