/**
 * MQTT topics of the interface description and the bus subjects behind them: built and
 * parsed here and nowhere else.
 */

/** An id or name may not contain MQTT wildcards or level separators. */
const SAFE_LEVEL = /^[^/+#\u0000]+$/

export const eventTopic = (deviceId: string, name: string) => `devices/${deviceId}/events/${name}`
export const locationTopic = (deviceId: string) => `devices/${deviceId}/locations`
export const commandRunTopic = (deviceId: string, slug: string) => `devices/${deviceId}/commands/${slug}/run`
/** Alerts about a device as they open, repeat and resolve (the Alert JSON of `GET /alerts/{id}`). */
export const alertTopic = (deviceId: string) => `devices/${deviceId}/alerts`

/**
 * Where an accepted device publish is re-routed inside the MQTT broker once it is stored, so
 * the raw packet reaches nobody: subscribers get the stored resource from the bus instead.
 * No filter a client may hold matches it: `$` topics are outside wildcards [MQTT-4.7.2-1]
 * and `subscriptionDevice` refuses it.
 */
export const INGESTED_TOPIC = "$voltaic/ingested"

/** What a publish to a topic asks for. */
export type PublishTopic =
  | { readonly kind: "event"; readonly deviceId: string; readonly name: string }
  | { readonly kind: "event"; readonly deviceId: undefined; readonly name: undefined }
  | { readonly kind: "location"; readonly deviceId: string | undefined }
  | { readonly kind: "command"; readonly deviceId: string; readonly slug: string }
  | { readonly kind: "command"; readonly deviceId: undefined; readonly slug: undefined }

/**
 * `events`, `devices/{id}/events/{name}`, `locations`, `devices/{id}/locations`, `commands`,
 * `devices/{id}/commands/{slug}`; anything else is not a topic devices may publish to.
 */
export const parsePublishTopic = (topic: string): PublishTopic | undefined => {
  if (topic === "events") return { kind: "event", deviceId: undefined, name: undefined }
  if (topic === "locations") return { kind: "location", deviceId: undefined }
  if (topic === "commands") return { kind: "command", deviceId: undefined, slug: undefined }
  const levels = topic.split("/")
  if (levels[0] !== "devices" || levels.length < 3 || !levels.every((l) => SAFE_LEVEL.test(l))) return undefined
  const deviceId = levels[1]
  if (levels.length === 4 && levels[2] === "events") return { kind: "event", deviceId, name: levels[3] }
  if (levels.length === 3 && levels[2] === "locations") return { kind: "location", deviceId }
  if (levels.length === 4 && levels[2] === "commands") return { kind: "command", deviceId, slug: levels[3] }
  return undefined
}

/**
 * The device a subscription filter is about: `devices/{id}/events/+`, `devices/{id}/events/{name}`,
 * `devices/{id}/locations`, `devices/{id}/commands/{slug}/run` (a `+` slug is allowed).
 * Filters with a wildcard device, or outside these shapes, are refused.
 */
export const subscriptionDevice = (filter: string): string | undefined => {
  const levels = filter.split("/")
  if (levels[0] !== "devices" || levels.length < 3) return undefined
  const deviceId = levels[1]
  if (!SAFE_LEVEL.test(deviceId)) return undefined
  const name = levels[3]
  const nameOk = (value: string | undefined) => value !== undefined && (value === "+" || SAFE_LEVEL.test(value))
  if (levels.length === 4 && levels[2] === "events" && nameOk(name)) return deviceId
  if (levels.length === 4 && levels[2] === "events" && name === "#") return deviceId
  if (levels.length === 3 && (levels[2] === "locations" || levels[2] === "alerts")) return deviceId
  if (levels.length === 5 && levels[2] === "commands" && nameOk(name) && levels[4] === "run") return deviceId
  return undefined
}

/** An event name or command slug usable as one topic level. */
export const isTopicLevel = (value: string): boolean => SAFE_LEVEL.test(value) && value.length <= 200

/** Bus subject carrying a device's deliveries (ids are `[a-z0-9_]`, safe as a NATS token). */
export const trafficSubject = (deviceId: string) => `voltaic.traffic.${deviceId}`
export const TRAFFIC_WILDCARD = "voltaic.traffic.>"
export const CONTROL_SUBJECT = "voltaic.control"

/** What a delivery's topic carries, for the console's live stream (`GET /v1/stream`). */
export type DeliveryKind = "event" | "location" | "command" | "alert"

export const deliveryKind = (topic: string): DeliveryKind | undefined => {
  const levels = topic.split("/")
  if (levels[0] !== "devices") return undefined
  if (levels.length === 4 && levels[2] === "events") return "event"
  if (levels.length === 3 && levels[2] === "locations") return "location"
  if (levels.length === 3 && levels[2] === "alerts") return "alert"
  if (levels.length === 5 && levels[2] === "commands" && levels[4] === "run") return "command"
  return undefined
}
