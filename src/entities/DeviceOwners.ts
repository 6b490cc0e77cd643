import { Context, Effect, FiberSet, Layer } from "effect"
import { Bus } from "../bus/Bus.ts"
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
  /** An organisation's alert rules were written: every process reconfigures its devices. */
  rulesChanged(organisationId: string): Effect.Effect<void>
}

const LIVE_TIMEOUT = "2 seconds"

export class DeviceOwners extends Context.Service<DeviceOwners, DeviceOwnersService>()("voltaic/entities/DeviceOwners") {
  static readonly layer = Layer.effect(
    DeviceOwners,
    Effect.gen(function*() {
      const bus = yield* Bus
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

      return DeviceOwners.of({
        live: (deviceIds) =>
          Effect.gen(function*() {
            const byBucket = new Map<string, Array<string>>()
            for (const id of deviceIds) {
              const bucket = bucketOf(id)
              const list = byBucket.get(bucket)
              if (list === undefined) byBucket.set(bucket, [id])
              else list.push(id)
            }
            const answers = yield* Effect.forEach(byBucket, ([bucket, ids]) =>
              client(bucket).GetDevices({ deviceIds: ids }).pipe(
                Effect.timeout(LIVE_TIMEOUT),
                Effect.catchCause((cause) => Effect.as(Effect.logDebug(`live: bucket ${bucket} did not answer`, cause), []))
              ), { concurrency: 16 })
            return new Map(answers.flat().map((live) => [live.deviceId, live]))
          }),
        // Here at once (the bus may be NATS, at-most-once), and in every process through the notice.
        rulesChanged: (organisationId) =>
          Effect.andThen(Effect.sync(() => reconfigure(organisationId)), bus.control({ type: "rules.changed", organisationId }))
      })
    })
  )
}
