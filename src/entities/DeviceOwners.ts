import { Context, Effect, FiberSet, Layer } from "effect"
import { Bus } from "../bus/Bus.ts"
import { Sql, type SqlError } from "../store/Sql.ts"
import { STORED_LIVE, type StoredLive, storedOf } from "../store/devices.ts"
import { bucketOf, DeviceBucket, type DeviceLive } from "./protocol.ts"
import { ResidentBuckets } from "./residents.ts"
import { Rules } from "./rules.ts"

/**
 * What the rest of the application asks of the devices' owners, wherever they run: their live
 * fields (`GetDevices`, one message per bucket), and rules changes (`rulesChanged`), which
 * every process hears (`rules.changed` on the bus) and passes to the buckets it hosts.
 */
export interface DeviceOwnersService {
  /**
   * The live fields of the devices whose owner hosts them now; a device its owner does not
   * hold in memory (or an owner that does not answer within LIVE_TIMEOUT) is left out.
   */
  live(deviceIds: ReadonlyArray<string>): Effect.Effect<ReadonlyMap<string, DeviceLive>>
  /**
   * Devices as REST answers them: with `live` (state, online, last seen) from their owner, or
   * from their stored snapshot where the owner does not hold them (`stored`, when read with the
   * device, else read here), and `lastSeenAt` the newer of their row's and their owner's.
   */
  withLive<D extends LiveSource>(devices: ReadonlyArray<D>): Effect.Effect<Array<Omit<D, "stored"> & { readonly live: LiveFields }>, SqlError>
  /** What `withLive` adds to each device (in order): its `lastSeenAt` and `live`, for answers built as text. */
  liveOf(devices: ReadonlyArray<LiveSource>): Effect.Effect<Array<{ readonly lastSeenAt: number | null; readonly live: LiveFields }>, SqlError>
  /** An organisation's alert rules were written: every process reconfigures its devices. */
  rulesChanged(organisationId: string): Effect.Effect<void>
  /**
   * A device moved (its space or product changed): its owner, wherever it is, takes the rules
   * that apply at its new place (an offline rule there starts watching it, one it left stops).
   */
  deviceMoved(organisationId: string, deviceId: string): Effect.Effect<void>
}

/** A device as read from the store, as far as its live fields go. */
export interface LiveSource {
  readonly id: string
  readonly lastSeenAt: number | null
  readonly stored?: StoredLive
}

export interface LiveFields {
  readonly isOnline: boolean
  /** The device machine's state: unknown (never seen), online, offline or unwatched (no offline rule). */
  readonly state: string
  readonly lastSeenAt: number | null
}

const newer = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b))

const LIVE_TIMEOUT = "2 seconds"

export class DeviceOwners extends Context.Service<DeviceOwners, DeviceOwnersService>()("voltaic/entities/DeviceOwners") {
  static readonly layer = Layer.effect(
    DeviceOwners,
    Effect.gen(function*() {
      const bus = yield* Bus
      const sql = yield* Sql
      const rules = yield* Rules
      const residents = yield* ResidentBuckets
      const client = yield* DeviceBucket.client
      const run = yield* FiberSet.makeRuntime<never>()

      /** Reconfigures the organisation's devices in the buckets resident here; others read rules when they activate. */
      const reconfigure = (organisationId: string) => {
        rules.invalidate(organisationId)
        for (const bucket of residents.list()) {
          run(client(bucket).RulesChanged({ organisationId }, { discard: true }).pipe(
            Effect.catchCause((cause) => Effect.logDebug(`rules: bucket ${bucket} not told (moved?)`, cause))
          ))
        }
      }
      yield* bus.onControl((message) => {
        if (message.type === "rules.changed") reconfigure(message.organisationId)
      })

      const live: DeviceOwnersService["live"] = Effect.fnUntraced(function*(deviceIds: ReadonlyArray<string>) {
        const byBucket = new Map<string, Array<string>>()
        for (const id of deviceIds) {
          const bucket = bucketOf(id)
          const list = byBucket.get(bucket)
          if (list === undefined) byBucket.set(bucket, [id])
          else list.push(id)
        }
        // A bucket this process hosts is read in memory: a device's state is whole between the
        // bucket's steps, which are synchronous per device. A message through the cluster, even
        // to this process, cost ~150 µs of CPU (bench:rest): ~3 ms for a page of 20 devices.
        const local: Array<DeviceLive> = []
        for (const [bucket, ids] of byBucket) {
          const resident = residents.get(bucket)
          if (resident === undefined) continue
          local.push(...resident.live(ids))
          byBucket.delete(bucket)
        }
        const answers = yield* Effect.forEach(byBucket, ([bucket, ids]) =>
          client(bucket).GetDevices({ deviceIds: ids }).pipe(
            Effect.timeout(LIVE_TIMEOUT),
            Effect.catchCause((cause) => Effect.as(Effect.logDebug(`live: bucket ${bucket} did not answer`, cause), []))
          ), { concurrency: 16 })
        return new Map([...local, ...answers.flat()].map((live) => [live.deviceId, live]))
      })

      const liveOf: DeviceOwnersService["liveOf"] = Effect.fnUntraced(function*(devices: ReadonlyArray<LiveSource>) {
        if (devices.length === 0) return []
        const owned = yield* live(devices.map((d) => d.id))
        const rest = devices.filter((d) => !owned.has(d.id) && d.stored === undefined).map((d) => d.id)
        const read = rest.length === 0 ? [] : yield* sql.query<{ device_id: string; stored: unknown }>(
          `SELECT da.device_id, ${STORED_LIVE} AS stored FROM device_actors da WHERE da.device_id = ANY($1::text[])`,
          [rest]
        )
        const byId = new Map<string, StoredLive>(read.map((r) => [r.device_id, storedOf(r.stored)]))
        return devices.map((device) => {
          const found = owned.get(device.id)
          const row = device.stored ?? byId.get(device.id)
          const state = found?.state ?? row?.state ?? "unknown"
          const seen = found !== undefined ? found.lastSeenAt : row?.lastSeenAt ?? null
          const lastSeenAt = newer(device.lastSeenAt, seen)
          return { lastSeenAt, live: { isOnline: state === "online", state, lastSeenAt } }
        })
      })
      const withLive: DeviceOwnersService["withLive"] = (devices) =>
        Effect.map(liveOf(devices), (lives) => devices.map(({ stored: _, ...device }, i) => ({ ...device, ...lives[i] })))

      return DeviceOwners.of({
        live,
        withLive,
        liveOf,
        // Here at once (the bus may be NATS, at-most-once), and in every process through the notice.
        rulesChanged: (organisationId) =>
          Effect.andThen(Effect.sync(() => reconfigure(organisationId)), bus.control({ type: "rules.changed", organisationId })),
        // Waited for, so the answer to the move comes after the owner took the device's new place.
        deviceMoved: (organisationId, deviceId) =>
          client(bucketOf(deviceId)).RulesChanged({ organisationId, deviceIds: [deviceId] }).pipe(
            Effect.timeout(LIVE_TIMEOUT),
            Effect.catchCause((cause) => Effect.logDebug(`device ${deviceId}: its owner not told of its move (it reads its place when it wakes)`, cause))
          )
      })
    })
  )
}
