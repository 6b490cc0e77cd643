import { Context, Effect, Layer } from "effect"
import { Bus } from "../bus/Bus.ts"
import type { NotFound } from "../domain/errors.ts"
import { getOne } from "./crud.ts"
import { deviceQuery } from "./devices.ts"
import { Sql, type SqlError } from "./Sql.ts"

/**
 * `GET /devices/{id}` and `GET /devices/me` are the hottest reads of the API (dashboards and
 * devices poll them). They are answered from a read-through cache of the device's JSON text,
 * kept correct by invalidation rather than by time:
 *
 * - every delivery on the bus (an event or location of the device was stored, so its
 *   `lastSeenAt` moved) drops that device, in every process, and so does a `devices.seen`
 *   notice (a sign of life of an MQTT session was stored: src/entities/SeenSender.ts);
 * - every write to a device, space, product, place or gateway of an organisation drops that
 *   organisation's devices, here and, through a bus control message, in every other process;
 * - a read that raced an invalidation does not store what it read (a placeholder marks the
 *   read; an invalidation removes it, so the late answer finds it gone).
 *
 * The TTL only bounds what a lost cross-process message (the NATS bus is at-most-once) could
 * leave stale. A miss or an unknown id is never cached.
 */
const TTL_MS = 30_000
const MAX_ENTRIES = 50_000

interface Entry {
  readonly organisationId: string
  /** The device as JSON text, exactly the response body; undefined while its read is in flight. */
  readonly json: string | undefined
  readonly until: number
}

export interface DeviceReadsService {
  /** The device as JSON text, from the cache or the store; another organisation's id is NotFound. */
  json(organisationId: string, id: string): Effect.Effect<string, NotFound | SqlError>
  /** Something an organisation's devices embed changed: drop them in every process. */
  changed(organisationId: string): Effect.Effect<void>
  /** Entries held now (tests, metrics). */
  readonly size: () => number
}

export class DeviceReads extends Context.Service<DeviceReads, DeviceReadsService>()("voltaic/store/DeviceReads") {
  static readonly layer = Layer.effect(
    DeviceReads,
    Effect.gen(function*() {
      const sql = yield* Sql
      const bus = yield* Bus
      const entries = new Map<string, Entry>()

      const dropOrganisation = (organisationId: string) => {
        for (const [id, entry] of entries) if (entry.organisationId === organisationId) entries.delete(id)
      }
      yield* bus.onDelivery((delivery) => {
        entries.delete(delivery.deviceId)
      })
      yield* bus.onControl((message) => {
        if (message.type === "devices.changed") dropOrganisation(message.organisationId)
        else if (message.type === "devices.seen") for (const id of message.deviceIds) entries.delete(id)
      })

      const evict = () => {
        // Insertion order: the oldest tenth goes (bounded memory without LRU bookkeeping per hit).
        let excess = entries.size - MAX_ENTRIES + Math.ceil(MAX_ENTRIES / 10)
        for (const id of entries.keys()) {
          if (excess-- <= 0) break
          entries.delete(id)
        }
      }

      const json = (organisationId: string, id: string): Effect.Effect<string, NotFound | SqlError> =>
        Effect.suspend(() => {
          const now = Date.now()
          const found = entries.get(id)
          if (found !== undefined && found.json !== undefined && found.until > now && found.organisationId === organisationId) {
            return Effect.succeed(found.json)
          }
          const mark: Entry = { organisationId, json: undefined, until: now + TTL_MS }
          if (found === undefined || found.json !== undefined) {
            if (entries.size >= MAX_ENTRIES) evict()
            entries.set(id, mark)
          }
          return getOne(sql, deviceQuery, organisationId, id).pipe(
            Effect.map(({ stored: _, ...device }) => {
              // Without the machine's row: that changes with no invalidation here, so it is read per request.
              const text = JSON.stringify(device)
              if (entries.get(id) === mark) entries.set(id, { organisationId, json: text, until: mark.until })
              return text
            }),
            Effect.tapError(() => Effect.sync(() => entries.get(id) === mark && entries.delete(id)))
          )
        })

      return DeviceReads.of({
        json,
        changed: (organisationId) =>
          Effect.andThen(
            Effect.sync(() => dropOrganisation(organisationId)),
            bus.control({ type: "devices.changed", organisationId })
          ),
        size: () => entries.size
      })
    })
  )
}
