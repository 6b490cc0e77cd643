import fc from "fast-check"
import mqttPacket from "mqtt-packet"
import {
  type Build,
  COMMAND_SLUG,
  commandData,
  type Device,
  type EventParts,
  garbage,
  invalidEvent,
  invalidLocation,
  type LocationParts,
  type Meta,
  mutated,
  objectText,
  type Targets,
  VALID_CUSTOM_IDS,
  validEvent,
  validLocation
} from "./common.ts"
import { cleanString, type PayloadOptions, wellFormed } from "./payloads.ts"

/**
 * The connection an MQTT input is sent on: one per credential and marker, so refusals on the
 * invalid lanes (three close a connection) never touch the valid ones.
 * - `subscriber`: an application's SUBSCRIBE, UNSUBSCRIBE and PINGREQ (a malformed filter closes
 *   the connection [MQTT-4.7.1], which must not cut the valid lanes' publishes short).
 * - `odd`: a mutated packet on a session of the odd device, followed by a PINGREQ.
 * - `raw`: bytes written to a fresh connection (a CONNECT of any sort, or garbage).
 */
export type MqttLane = "valid-device" | "valid-app" | "invalid-device" | "invalid-app" | "subscriber" | "odd" | "raw"
export const MQTT_LANES: ReadonlyArray<MqttLane> = ["valid-device", "valid-app", "invalid-device", "invalid-app", "subscriber", "odd", "raw"]

/** A packet sent in a session; the lane gives it a message id. */
export type SessionPacket =
  | { readonly cmd: "publish"; readonly topic: string; readonly payload: string; readonly qos: 0 | 1 | 2 }
  | { readonly cmd: "subscribe"; readonly topic: string; readonly qos: 0 | 1 | 2 }
  | { readonly cmd: "unsubscribe"; readonly topic: string }
  | { readonly cmd: "pingreq" }

export interface MqttInput extends Meta {
  readonly lane: MqttLane
  readonly packet?: SessionPacket
  readonly bytes?: Buffer
}

/** The credential a lane connects with. */
export const laneKey = (lane: MqttLane, t: Targets): string =>
  lane === "valid-device" ? t.valid.key : lane === "invalid-device" ? t.invalid.key : lane === "odd" ? t.odd.key : t.appKey

const eventPayload = (e: EventParts, seq: number, device: string | undefined) =>
  objectText([["name", e.name], ["data", e.data], ["timestamp", e.timestamp(seq)], ["device", device]])

const locationPayload = (l: LocationParts, seq: number, device: string | undefined) =>
  objectText([["latitude", l.latitude], ["longitude", l.longitude], ["altitude", l.altitude], ["timestamp", l.timestamp(seq)], ["device", device]])

const topicName = (nameText: string): string | undefined => {
  const name: unknown = JSON.parse(nameText)
  // A topic is UTF-8 without NUL [MQTT-1.5.3-1, -2]: a lone surrogate would be sent as U+FFFD, a valid name.
  return typeof name === "string" && name !== "" && !/[/+#\u0000]/.test(name) && wellFormed(name) ? name : undefined
}

/**
 * An event or location publish on any topic form of the README "MQTT topics": the short topic
 * (device from the key, or named in the payload by an application) or the device's own.
 */
const trafficPublish = (
  parts: fc.Arbitrary<EventParts | LocationParts>,
  lanes: readonly [device: MqttLane, app: MqttLane],
  target: (t: Targets) => Device,
  customIds: ReadonlyArray<string>
): fc.Arbitrary<Build<MqttInput>> =>
  fc.tuple(parts, fc.integer({ min: 0, max: 5 }), fc.constantFrom<0 | 1 | 2>(1, 1, 1, 1, 0, 2), fc.constantFrom(...customIds, "")).map(
    ([p, form, qos, customId]) => (t, seq) => {
      const device = target(t)
      const app = form >= 3
      const ref = customId !== "" && form === 5 ? objectText([["customId", JSON.stringify(customId)]]) : objectText([["id", JSON.stringify(device.id)]])
      const lane = app ? lanes[1] : lanes[0]
      const base = { marker: p.marker, invalid: p.invalid, tagged: p.tagged, lane } as const
      if ("latitude" in p) {
        const own = form % 2 === 0
        return {
          ...base,
          what: "location",
          packet: { cmd: "publish", qos, topic: own ? `devices/${device.id}/locations` : "locations", payload: locationPayload(p, seq, app && !own ? ref : undefined) }
        }
      }
      const name = topicName(p.name)
      if (form % 2 === 0 && name !== undefined) {
        // On the device's topic the name is the last level: `{"data", "timestamp"}`, or bare data
        // (untagged; not for an input whose broken rule is its timestamp, which bare data drops).
        const bare = form === 4 && p.tagged
        return {
          ...base,
          tagged: p.tagged && !bare,
          what: "event",
          packet: { cmd: "publish", qos, topic: `devices/${device.id}/events/${name}`, payload: bare ? p.data : objectText([["data", p.data], ["timestamp", p.timestamp(seq)]]) }
        }
      }
      return { ...base, what: "event", packet: { cmd: "publish", qos, topic: "events", payload: eventPayload(p, seq, app ? ref : undefined) } }
    }
  )

/** A command run from an application, on `commands` or the device's command topic. */
const commandPublish = (options: PayloadOptions): fc.Arbitrary<Build<MqttInput>> =>
  fc.tuple(commandData(options), fc.boolean()).map(([{ data, why }, short]) => (t) => {
    const device = why === undefined ? t.valid : t.invalid
    return {
      marker: why === undefined ? "valid" : "invalid",
      invalid: why?.invalid,
      tagged: false,
      what: "command",
      lane: why === undefined ? "valid-app" : "invalid-app",
      packet: short
        ? { cmd: "publish", qos: 1, topic: "commands", payload: objectText([["slug", JSON.stringify(COMMAND_SLUG)], ["device", objectText([["id", JSON.stringify(device.id)]])], ["data", data]]) }
        : { cmd: "publish", qos: 1, topic: `devices/${device.id}/commands/${COMMAND_SLUG}`, payload: objectText([["data", data]]) }
    }
  })

/** Subscription filters: the allowed shapes, other devices', wildcards and junk. */
const filter: fc.Arbitrary<(t: Targets) => string> = fc.oneof(
  fc.constantFrom(
    (t: Targets) => `devices/${t.valid.id}/locations`,
    (t: Targets) => `devices/${t.valid.id}/commands/+/run`,
    (t: Targets) => `devices/${t.invalid.id}/alerts`,
    () => "#",
    () => "devices/+/events/+",
    () => "$SYS/#",
    () => "$voltaic/ingested"
  ),
  cleanString(0, 30).map((name) => (t: Targets) => `devices/${t.valid.id}/events/${name}`),
  cleanString(0, 60).map((s) => () => s)
)

const subscription: fc.Arbitrary<Build<MqttInput>> = fc.tuple(filter, fc.constantFrom<0 | 1 | 2>(0, 1, 2), fc.integer({ min: 0, max: 4 })).map(
  ([topic, qos, form]) => (t) => ({
    marker: "odd",
    tagged: false,
    what: form === 0 ? "unsubscribe" : form === 1 ? "pingreq" : "subscribe",
    lane: "subscriber",
    packet: form === 0 ? { cmd: "unsubscribe", topic: topic(t) } : form === 1 ? { cmd: "pingreq" } : { cmd: "subscribe", topic: topic(t), qos }
  })
)

/**
 * `mqtt-packet`'s encoder; it refuses some packets (throwing from an error event), and then
 * the input is a CONNECT with no payload, which is malformed too.
 */
const packetBytes = (packet: mqttPacket.Packet): Buffer => {
  try {
    return mqttPacket.generate(packet)
  } catch {
    return Buffer.of(0x10, 0x00)
  }
}

const connectPacket = fc.record({
  username: fc.oneof(fc.constantFrom("valid", "odd", "app", ""), cleanString(0, 40)),
  clientId: fc.oneof(fc.constant(""), cleanString(1, 30)),
  protocolVersion: fc.constantFrom<3 | 4 | 5>(4, 4, 4, 3, 5),
  clean: fc.boolean(),
  keepalive: fc.integer({ min: 0, max: 65535 }),
  will: fc.option(fc.tuple(fc.constantFrom("events", "devices/x/events/gone", "#", ""), fc.constantFrom('{"name":"will","data":1}', "not json", "{}")), { nil: undefined })
})

/** CONNECT bytes for a fresh connection: credential names resolve to the run's keys. */
const connectBytes = (c: fc.Arbitrary<typeof connectPacket extends fc.Arbitrary<infer C> ? C : never>): fc.Arbitrary<(t: Targets) => Buffer> =>
  c.map((p) => (t) => {
    const username = p.username === "valid" ? t.odd.key : p.username === "odd" ? `d_sk_${p.clientId}` : p.username === "app" ? t.appKey : p.username
    return packetBytes({
      cmd: "connect",
      protocolId: p.protocolVersion === 3 ? "MQIsdp" : "MQTT",
      protocolVersion: p.protocolVersion,
      clientId: p.protocolVersion === 3 && p.clientId === "" ? "c" : p.clientId,
      clean: p.clean || p.clientId === "",
      keepalive: p.keepalive,
      ...(username === "" ? {} : { username, password: Buffer.from(" ") }),
      ...(p.will === undefined ? {} : { will: { topic: p.will[0] === "" ? "w" : p.will[0], payload: Buffer.from(p.will[1]), qos: 1 as const, retain: false } })
    })
  })

/** A packet of the odd device's session, as bytes (message id 1), to be mutated. */
const oddPacketBytes: fc.Arbitrary<(t: Targets) => Buffer> = fc.oneof(validEvent, validLocation).chain((p) =>
  fc.constantFrom(0, 1, 2).map((form) => (t: Targets) => {
    const seq = 0
    const payload = "latitude" in p ? locationPayload(p, seq, undefined) : form === 0 ? eventPayload(p, seq, undefined) : p.data
    const topic = "latitude" in p ? "locations" : form === 0 ? "events" : `devices/${t.odd.id}/events/${topicName(p.name) ?? "x"}`
    return form === 2
      ? packetBytes({ cmd: "subscribe", messageId: 1, subscriptions: [{ topic: `devices/${t.odd.id}/events/+`, qos: 1 }] })
      : packetBytes({ cmd: "publish", topic, payload, qos: 1, messageId: 1, dup: false, retain: false })
  })
)

export const mqttInput = (options: PayloadOptions): fc.Arbitrary<Build<MqttInput>> =>
  fc.oneof(
    { weight: 30, arbitrary: trafficPublish(fc.oneof({ weight: 3, arbitrary: validEvent }, { weight: 1, arbitrary: validLocation }), ["valid-device", "valid-app"], (t) => t.valid, VALID_CUSTOM_IDS) },
    { weight: 20, arbitrary: trafficPublish(fc.oneof({ weight: 3, arbitrary: invalidEvent(options) }, { weight: 1, arbitrary: invalidLocation(options) }), ["invalid-device", "invalid-app"], (t) => t.invalid, []) },
    { weight: 4, arbitrary: commandPublish(options) },
    { weight: 4, arbitrary: subscription },
    {
      weight: 10,
      arbitrary: mutated(oddPacketBytes).map((make): Build<MqttInput> => (t) => ({ marker: "odd", tagged: false, what: "mutated packet", lane: "odd", bytes: make(t) }))
    },
    {
      weight: 4,
      arbitrary: fc.oneof(
        connectBytes(connectPacket).map((make) => ({ what: "connect", make })),
        mutated(connectBytes(connectPacket)).map((make) => ({ what: "mutated connect", make })),
        garbage.map((bytes) => ({ what: "garbage", make: (_t: Targets) => bytes }))
      ).map(({ what, make }): Build<MqttInput> => (t) => ({ marker: "odd", tagged: false, what, lane: "raw", bytes: make(t) }))
    }
  )

