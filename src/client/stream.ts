import mqtt, { type IClientOptions, type MqttClient } from "mqtt"
import { commandRunTopic, eventTopic, locationTopic } from "../bus/topics.ts"
import type { Event, Location } from "./rest.ts"

/**
 * The live side for devices and applications, over MQTT (TCP `mqtt://`, TLS `mqtts://`, or
 * WebSocket `ws://`). The credential is the MQTT username; the password is one space.
 *
 * ```ts
 * // a device
 * const device = connectStream({ url: "mqtt://localhost:1883", key: "d_sk_…" })
 * await device.publishEvent("temperature", 21.5)
 * device.onCommand(deviceId, "reboot", (run) => …)
 *
 * // an application
 * const app = connectStream({ url: "mqtt://localhost:1883", key: "a_sk_…" })
 * await app.subscribeEvents(deviceId, (event) => console.log(event.name, event.data))
 * ```
 */

export interface StreamOptions {
  readonly url: string
  readonly key: string
  /** Default 1: publishes resolve once the server has stored them (PUBACK). */
  readonly qos?: 0 | 1
  readonly mqtt?: IClientOptions
}

export interface CommandRunMessage {
  id: string
  slug: string
  data: unknown
  device: { id: string }
  timestamp: number
}

/** The connection notifications of the interface description. */
export type StreamNotification = "connect" | "reconnect" | "disconnect" | "offline" | "error"

type Listener = (value: never) => void

export interface StreamClient {
  on(event: "connect" | "reconnect" | "disconnect" | "offline", listener: () => void): StreamClient
  on(event: "error", listener: (error: Error) => void): StreamClient
  off(event: StreamNotification, listener: (...args: Array<never>) => void): StreamClient
  /** Resolves when connected (rejects on a refused connection). */
  ready(): Promise<void>
  /** As the device of a device key (short topic), or for `deviceId` with an application key. */
  publishEvent(name: string, data: unknown, options?: { deviceId?: string; timestamp?: number }): Promise<void>
  publishLocation(location: { latitude: number; longitude: number; altitude?: number }, options?: { deviceId?: string }): Promise<void>
  runCommand(deviceId: string, slug: string, data?: unknown): Promise<void>
  subscribeEvents(deviceId: string, handler: (event: Event) => void, options?: { name?: string }): Promise<() => Promise<void>>
  subscribeLocations(deviceId: string, handler: (location: Location) => void): Promise<() => Promise<void>>
  onCommand(deviceId: string, slug: string, handler: (run: CommandRunMessage) => void): Promise<() => Promise<void>>
  close(): Promise<void>
}

/** MQTT topic filter matching (`+` one level, `#` the rest). */
const matches = (filter: string, topic: string): boolean => {
  const f = filter.split("/")
  const t = topic.split("/")
  for (let i = 0; i < f.length; i++) {
    if (f[i] === "#") return true
    if (i >= t.length || (f[i] !== "+" && f[i] !== t[i])) return false
  }
  return f.length === t.length
}

export const connectStream = (options: StreamOptions): StreamClient => {
  const qos = options.qos ?? 1
  const client: MqttClient = mqtt.connect(options.url, {
    username: options.key,
    password: " ",
    reconnectPeriod: 1_000,
    ...options.mqtt
  })
  const handlers = new Map<string, Set<(payload: unknown) => void>>()
  client.on("message", (topic, payload) => {
    let value: unknown
    try {
      value = JSON.parse(payload.toString("utf8"))
    } catch (cause) {
      // A parsing error is an `error` notification (interface "Events" 4); with nobody
      // listening it is dropped rather than thrown out of the socket's handler.
      if (client.listenerCount("error") > 0) {
        client.emit("error", new Error(`a message on ${topic} is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`))
      }
      return
    }
    for (const [filter, set] of handlers) if (matches(filter, topic)) for (const h of set) h(value)
  })
  // `close` is what mqtt.js emits after a disconnection: the interface calls it `disconnect`.
  const mqttEventOf = (event: StreamNotification) => event === "disconnect" ? "close" : event
  // One wrapper per (notification, listener): the same function may listen to several.
  const listeners = new Map<StreamNotification, Map<Listener, (...args: Array<unknown>) => void>>()

  const subscribe = async (filter: string, handler: (payload: unknown) => void) => {
    const grants = await client.subscribeAsync(filter, { qos })
    if (grants.some((g) => g.qos === 128)) throw new Error(`subscription to ${filter} refused`)
    let set = handlers.get(filter)
    if (set === undefined) handlers.set(filter, (set = new Set()))
    set.add(handler)
    return async () => {
      set.delete(handler)
      if (set.size === 0) {
        handlers.delete(filter)
        await client.unsubscribeAsync(filter)
      }
    }
  }

  const publish = async (topic: string, body: unknown) => {
    await client.publishAsync(topic, JSON.stringify(body), { qos })
  }

  const stream: StreamClient = {
    on: (event: StreamNotification, listener: Listener) => {
      let wrappers = listeners.get(event)
      if (wrappers === undefined) listeners.set(event, (wrappers = new Map()))
      if (wrappers.has(listener)) return stream
      const wrapped = (...args: Array<unknown>) => (listener as (...a: Array<unknown>) => void)(...args)
      wrappers.set(listener, wrapped)
      client.on(mqttEventOf(event), wrapped)
      return stream
    },
    off: (event: StreamNotification, listener: Listener) => {
      const wrappers = listeners.get(event)
      const wrapped = wrappers?.get(listener)
      if (wrapped !== undefined) {
        wrappers?.delete(listener)
        client.off(mqttEventOf(event), wrapped)
      }
      return stream
    },
    ready: () =>
      client.connected ? Promise.resolve() : new Promise<void>((resolve, reject) => {
        const onConnect = () => {
          client.off("error", onError)
          resolve()
        }
        const onError = (error: Error) => {
          client.off("connect", onConnect)
          reject(error)
        }
        client.once("connect", onConnect)
        client.once("error", onError)
      }),
    publishEvent: (name, data, opts = {}) =>
      opts.deviceId === undefined
        ? publish("events", { name, data, timestamp: opts.timestamp })
        : publish(eventTopic(opts.deviceId, name), { data, timestamp: opts.timestamp }),
    publishLocation: (location, opts = {}) =>
      publish(opts.deviceId === undefined ? "locations" : locationTopic(opts.deviceId), location),
    runCommand: (deviceId, slug, data) => publish("commands", { slug, device: { id: deviceId }, data }),
    subscribeEvents: (deviceId, handler, opts = {}) =>
      subscribe(eventTopic(deviceId, opts.name ?? "+"), (value) => handler(value as Event)),
    subscribeLocations: (deviceId, handler) => subscribe(locationTopic(deviceId), (value) => handler(value as Location)),
    onCommand: (deviceId, slug, handler) =>
      subscribe(commandRunTopic(deviceId, slug), (value) => handler(value as CommandRunMessage)),
    close: () => client.endAsync()
  }
  return stream
}
