import { Context, Effect, Layer } from "effect"
import { coalesce } from "./coalesce.ts"
import { type AlertChanged, type DeviceLiveness, Space } from "./protocol.ts"

/**
 * What the device and alert buckets of this process tell the spaces (`Changes`), one message per
 * space for all the steps that told it something within the coalescing window (`coalesce.ts`).
 * Devices fall silent together and sit in few spaces: a thousand bucket steps would otherwise
 * queue a thousand messages on one Space entity, which handles them one at a time. Each caller
 * is answered once its space applied the combined message, or fails (and retries on its own) if
 * that space's message failed.
 */
export interface SpaceChange {
  readonly spaceId: string
  readonly devices: ReadonlyArray<DeviceLiveness>
  readonly alerts: ReadonlyArray<AlertChanged>
}

/** Messages sent at once, to different spaces. */
const CONCURRENCY = 16

export class SpaceNotTold extends Error {
  constructor(readonly spaceIds: ReadonlyArray<string>) {
    super(`space changes not applied: ${spaceIds.join(", ")}`)
  }
}

export class SpaceChanges extends Context.Service<SpaceChanges, {
  /** Tells each space its changes; succeeds once every one of them applied them. */
  readonly tell: (changes: ReadonlyArray<SpaceChange>) => Effect.Effect<void, SpaceNotTold>
}>()("voltaic/entities/SpaceChanges") {
  static readonly layer = Layer.effect(
    SpaceChanges,
    Effect.gen(function*() {
      const spaces = yield* Space.client
      const send = coalesce({
        run: (changes: ReadonlyArray<SpaceChange>) => {
          const bySpace = new Map<string, { devices: Array<DeviceLiveness>; alerts: Array<AlertChanged> }>()
          for (const change of changes) {
            const merged = bySpace.get(change.spaceId) ?? { devices: [], alerts: [] }
            merged.devices.push(...change.devices)
            merged.alerts.push(...change.alerts)
            bySpace.set(change.spaceId, merged)
          }
          // Answers the spaces told: a space whose message failed is missing, and its callers fail.
          return Effect.map(
            Effect.forEach(bySpace, ([spaceId, merged]) =>
              spaces(spaceId).Changes(merged).pipe(
                Effect.as([spaceId]),
                Effect.catchCause((cause) => Effect.as(Effect.logWarning(`space ${spaceId}: changes not applied`, cause), []))
              ), { concurrency: CONCURRENCY }),
            (told) => told.flat()
          )
        },
        itemKey: (change) => change.spaceId,
        outputKey: (spaceId) => spaceId
      })
      return SpaceChanges.of({
        tell: (changes) =>
          Effect.flatMap(send(changes), (told) => {
            const missing = [...new Set(changes.map((c) => c.spaceId))].filter((id) => !told.includes(id))
            return missing.length === 0 ? Effect.void : Effect.fail(new SpaceNotTold(missing))
          })
      })
    })
  )
}
