import { Cause, Context, Effect, Exit, Layer } from "effect"
import type { Principal } from "../auth/Principal.ts"
import { Bus } from "../bus/Bus.ts"
import { Activity } from "./Activity.ts"
import { makeCommandRuns } from "./commandRuns.ts"
import { gone, makeDeviceResolver } from "./devices.ts"
import { DeviceReads } from "../store/DeviceReads.ts"
import { eventTopic, locationTopic } from "../bus/topics.ts"
import { Forbidden, InvalidInput, NotFound, PayloadTooLarge, type Unavailable } from "../domain/errors.ts"
import { newId } from "../domain/ids.ts"
import { energyReadingOf, isEnergyKind } from "../energy/readings.ts"
import { countEvent, ingestOutcomeOf } from "../metrics.ts"
import { Sql, type SqlError } from "../store/Sql.ts"
import { type EventFile, Writer } from "../store/Writer.ts"
import { type CommandRunInput, type DeviceRef, type EventInput, type LocationInput, MAX_EVENT_DATA_BYTES } from "./schemas.ts"

export type Protocol = "http" | "mqtt" | "coap"

/** The one canonical shape every protocol produces (ARCHITECTURE "Envelope"). */
export interface Envelope<P> {
  readonly principal: Principal
  readonly protocol: Protocol
  /** The device the envelope is for, as named by the sender; a device key ignores it. */
  readonly device: DeviceRef | undefined
  readonly payload: P
}

export interface EventJson {
  id: string
  name: string
  data: unknown
  timestamp: number
  device: { id: string }
  file?: { filename: string | null; contentType: string; size: number }
}

export interface LocationJson {
  id: string
  latitude: string
  longitude: string
  altitude: string | null
  timestamp: number
  device: { id: string }
}

export interface CommandRunJson {
  id: string
  slug: string
  data: unknown
  device: { id: string }
  timestamp: number
}

export type IngestError = Forbidden | InvalidInput | NotFound | PayloadTooLarge | Unavailable | SqlError

export interface IngestService {
  event(envelope: Envelope<EventInput & { readonly file?: EventFile | undefined }>): Effect.Effect<EventJson, IngestError>
  location(envelope: Envelope<LocationInput>): Effect.Effect<LocationJson, IngestError>
  runCommand(envelope: Envelope<CommandRunInput>): Effect.Effect<CommandRunJson & { command: { id: string } }, IngestError>
  /**
   * `event` without a fiber for the common case: no file, no energy reading, and a device
   * known without asking the store. `done` is called once the event is stored and delivered
   * (or not stored); false, without calling `done`, means "use `event`" (which also answers
   * every refusal). `wait`: the sender is held back by its transport, so the writer may queue
   * it beyond the limit at which others are refused.
   */
  submitEvent(
    envelope: Envelope<EventInput>,
    done: (exit: Exit.Exit<EventJson, SqlError | NotFound>) => void,
    wait?: boolean
  ): boolean
  /** Forgets cached device ownership and commands (after a device is deleted). */
  forgetDevices(): void
  /**
   * An organisation's command was renamed or deleted: the commands held for runs are dropped
   * here and, by a bus notice, in every other process.
   */
  commandsChanged(organisationId: string): Effect.Effect<void>
}

/** JSON text over the data limit in UTF-8 bytes; the byte count is taken only when it could be. */
const tooLarge = (text: string) => text.length * 3 > MAX_EVENT_DATA_BYTES && Buffer.byteLength(text) > MAX_EVENT_DATA_BYTES



/** Counts an event's outcome (`voltaic_events_ingested_total`); an interruption is not one. */
const countEventExit = (protocol: Protocol, exit: Exit.Exit<unknown, { readonly _tag: string }>) => {
  if (Exit.isSuccess(exit)) return countEvent(protocol, "stored")
  const failure = exit.cause.reasons.find(Cause.isFailReason)
  if (failure !== undefined) countEvent(protocol, ingestOutcomeOf(failure.error))
  else if (!Cause.hasInterruptsOnly(exit.cause)) countEvent(protocol, "failed")
}

/** A number as stored in a numeric column: the shortest exact decimal JavaScript prints. */
const decimal = (n: number) => String(n)

export class Ingest extends Context.Service<Ingest, IngestService>()("voltaic/ingest/Ingest") {
  static readonly layer = Layer.effect(
    Ingest,
    Effect.gen(function*() {
      const sql = yield* Sql
      const writer = yield* Writer
      const bus = yield* Bus
      const activity = yield* Activity
      const reads = yield* DeviceReads
      // A device created by its first event is one more in its organisation's lists.
      const { resolveDevice, knownDevice, forget } = makeDeviceResolver(sql, (organisationId) => reads.changed(organisationId))

      const dataText = (data: unknown) => {
        if (data === undefined) return Effect.succeed(null)
        const text = JSON.stringify(data)
        return tooLarge(text) ? Effect.fail(new PayloadTooLarge({ limit: MAX_EVENT_DATA_BYTES })) : Effect.succeed(text)
      }
      const { runCommand, commandsChanged, forgetCommands } = yield* makeCommandRuns({ sql, writer, bus, resolveDevice, dataText })

      const event: IngestService["event"] = Effect.fnUntraced(function*(envelope: Envelope<EventInput & { readonly file?: EventFile | undefined }>) {
        const input = envelope.payload
        // Every refusal of the payload comes before the device is resolved: a new customId
        // creates its device, and a refused event must change nothing.
        const data = yield* dataText(input.data)
        const reading = yield* energyReadingOf(input.name, input.data)
        const deviceId = yield* resolveDevice(envelope.principal, envelope.device)
        const now = Date.now()
        const id = newId("evt", now)
        const timestamp = input.timestamp ?? now
        yield* Effect.mapError(writer.write({
          _tag: "event",
          row: {
            id,
            organisationId: envelope.principal.organisationId,
            deviceId,
            name: input.name,
            data,
            timestamp,
            receivedAt: now,
            protocol: envelope.protocol,
            file: input.file,
            reading
          }
        }), gone("device", deviceId))
        const json: EventJson = { id, name: input.name, data: input.data ?? null, timestamp, device: { id: deviceId } }
        activity.publish({
          organisationId: envelope.principal.organisationId,
          deviceId,
          at: now,
          event: { id, name: input.name, data: json.data, timestamp }
        })
        if (input.file !== undefined) {
          json.file = { filename: input.file.filename, contentType: input.file.contentType, size: input.file.bytes.byteLength }
        }
        yield* bus.deliver({
          organisationId: envelope.principal.organisationId,
          deviceId,
          topic: eventTopic(deviceId, input.name),
          payload: JSON.stringify(json)
        })
        return json
      }, (effect, envelope) => Effect.onExit(effect, (exit) => Effect.sync(() => countEventExit(envelope.protocol, exit))))

      const submitEvent: IngestService["submitEvent"] = (envelope, done, wait) => {
        const input = envelope.payload
        if (isEnergyKind(input.name)) return false
        const deviceId = knownDevice(envelope.principal, envelope.device)
        if (deviceId === undefined) return false
        const data = input.data === undefined ? null : JSON.stringify(input.data)
        if (data !== null && tooLarge(data)) return false
        const organisationId = envelope.principal.organisationId
        const now = Date.now()
        const id = newId("evt", now)
        const timestamp = input.timestamp ?? now
        const row = { id, organisationId, deviceId, name: input.name, data, timestamp, receivedAt: now, protocol: envelope.protocol }
        return writer.submit({ _tag: "event", row }, (exit) => {
          if (Exit.isFailure(exit)) {
            const failed = Exit.failCause(Cause.map(exit.cause, gone("device", deviceId)))
            countEventExit(envelope.protocol, failed)
            return done(failed)
          }
          countEvent(envelope.protocol, "stored")
          const json: EventJson = { id, name: input.name, data: input.data ?? null, timestamp, device: { id: deviceId } }
          activity.publish({ organisationId, deviceId, at: now, event: { id, name: input.name, data: json.data, timestamp } })
          // The stored JSON text of `data` is reused rather than serialised again.
          const payload = `{"id":"${id}","name":${JSON.stringify(input.name)},"data":${data ?? "null"},"timestamp":${timestamp},"device":{"id":${JSON.stringify(deviceId)}}}`
          bus.send({ organisationId, deviceId, topic: eventTopic(deviceId, input.name), payload })
          done(Exit.succeed(json))
        }, wait)
      }

      const location: IngestService["location"] = Effect.fnUntraced(function*(envelope: Envelope<LocationInput>) {
        const deviceId = yield* resolveDevice(envelope.principal, envelope.device)
        const input = envelope.payload
        const now = Date.now()
        const json: LocationJson = {
          id: newId("loc", now),
          latitude: decimal(input.latitude),
          longitude: decimal(input.longitude),
          altitude: input.altitude === undefined ? null : decimal(input.altitude),
          timestamp: input.timestamp ?? now,
          device: { id: deviceId }
        }
        yield* Effect.mapError(writer.write({
          _tag: "location",
          row: {
            id: json.id,
            organisationId: envelope.principal.organisationId,
            deviceId,
            latitude: json.latitude,
            longitude: json.longitude,
            altitude: json.altitude,
            timestamp: json.timestamp,
            receivedAt: now,
            protocol: envelope.protocol
          }
        }), gone("device", deviceId))
        activity.publish({ organisationId: envelope.principal.organisationId, deviceId, at: now })
        yield* bus.deliver({
          organisationId: envelope.principal.organisationId,
          deviceId,
          topic: locationTopic(deviceId),
          payload: JSON.stringify(json)
        })
        return json
      })

      return Ingest.of({
        event,
        submitEvent,
        location,
        runCommand,
        commandsChanged,
        forgetDevices: () => {
          forget()
          forgetCommands()
        }
      })
    })
  )
}
