/**
 * The steady load of `npm run chaos` (bench/chaos.ts): mqtt.js publishers sending QoS 1 events
 * numbered per publisher, and one subscriber to all their devices. Every send, PUBACK and
 * delivery is kept with its time, so that the run can tell what was acknowledged, what was
 * stored and how long each fault held either back.
 */
import mqtt, { type MqttClient } from "mqtt"

export const EVENT_NAME = "chaos"

/** One event, `${publisher}:${sequence}`. */
export interface Sent {
  readonly sentAt: number
  ackedAt?: number
  /** The client reported an error for it (it will not be re-sent). */
  failed?: string
}

export interface Traffic {
  readonly sent: Map<string, Sent>
  /** First delivery of each event to the subscriber. */
  readonly delivered: Map<string, number>
  /** When a publisher's connection closed (the server closing it, or the network). */
  readonly closes: Array<number>
  /** Sends skipped because a publisher already had `window` events unacknowledged. */
  heldBack: number
}

export interface Device {
  readonly id: string
  readonly secretKey: string
}

const connected = (client: MqttClient, what: string, timeoutMs: number) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no CONNACK within ${timeoutMs} ms`)), timeoutMs)
    client.once("connect", () => {
      clearTimeout(timer)
      resolve()
    })
  })

export const key = (publisher: number, sequence: number) => `${publisher}:${sequence}`

/** Subscribes one application-key client to every device's events; resolves once subscribed. */
export const startSubscriber = async (mqttUrl: string, appKey: string, devices: ReadonlyArray<Device>, traffic: Traffic) => {
  const client = mqtt.connect(mqttUrl, { username: appKey, password: " ", reconnectPeriod: 200, connectTimeout: 5_000, clientId: "chaos-subscriber" })
  client.on("error", () => {})
  client.on("message", (_topic, payload) => {
    const now = Date.now()
    try {
      const event = JSON.parse(payload.toString()) as { data?: { p?: number; s?: number } }
      if (typeof event.data?.p !== "number" || typeof event.data.s !== "number") return
      const k = key(event.data.p, event.data.s)
      if (!traffic.delivered.has(k)) traffic.delivered.set(k, now)
    } catch {
      // Not one of ours.
    }
  })
  // Subscriptions are renewed on each reconnection (mqtt.js `resubscribe`, the default).
  await connected(client, "subscriber", 30_000)
  await client.subscribeAsync(devices.map((d) => `devices/${d.id}/events/${EVENT_NAME}`), { qos: 1 })
  return { close: () => client.endAsync(true) }
}

/**
 * One mqtt.js client per device publishing `ratePerSecond` events together, paced on a 10 ms
 * tick, at most `window` unacknowledged per client. mqtt.js re-sends an unacknowledged QoS 1
 * publish after it reconnects.
 */
export const startPublishers = async (mqttUrl: string, devices: ReadonlyArray<Device>, ratePerSecond: number, window: number, traffic: Traffic) => {
  const clients = await Promise.all(devices.map(async (device, p) => {
    const client = mqtt.connect(mqttUrl, {
      username: device.secretKey,
      password: " ",
      reconnectPeriod: 200,
      connectTimeout: 5_000,
      clientId: `chaos-publisher-${p}`
    })
    client.on("error", () => {})
    client.on("close", () => traffic.closes.push(Date.now()))
    await connected(client, `publisher ${p}`, 30_000)
    return client
  }))
  const perClient = ratePerSecond / clients.length
  const next = clients.map(() => 0)
  const unacked = clients.map(() => 0)
  const started = Date.now()
  const publish = (p: number) => {
    const s = next[p]++
    const k = key(p, s)
    const sent: Sent = { sentAt: Date.now() }
    traffic.sent.set(k, sent)
    unacked[p] += 1
    clients[p].publish(`devices/${devices[p].id}/events/${EVENT_NAME}`, JSON.stringify({ data: { p, s } }), { qos: 1 }, (error) => {
      unacked[p] -= 1
      if (error) sent.failed = error.message
      else sent.ackedAt = Date.now()
    })
  }
  const tick = setInterval(() => {
    const due = Math.floor((Date.now() - started) * perClient / 1000)
    for (let p = 0; p < clients.length; p++) {
      while (next[p] < due) {
        if (unacked[p] >= window) {
          traffic.heldBack += due - next[p]
          // Skipped, not queued: the sequence moves on so that the rate stays what it was.
          next[p] = due
          break
        }
        publish(p)
      }
    }
  }, 10)
  return {
    /** Stops sending; waits (at most `drainMs`) for every send to be acknowledged, then disconnects. */
    stop: async (drainMs: number) => {
      clearInterval(tick)
      const until = Date.now() + drainMs
      while (unacked.some((n) => n > 0) && Date.now() < until) await new Promise((r) => setTimeout(r, 50))
      await Promise.all(clients.map((c) => c.endAsync(true)))
      return unacked.reduce((a, b) => a + b, 0)
    }
  }
}
