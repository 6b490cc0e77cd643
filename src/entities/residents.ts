import { Context, Layer } from "effect"
import type { DeviceLive, SpaceLive } from "./protocol.ts"

/** What a resident bucket shows of itself: the devices it holds in memory. */
export interface Resident {
  readonly devices: ReadonlyMap<string, unknown>
  /** Whether it read the deadlines its rows hold (its devices an earlier owner left with one). */
  readonly timed: () => boolean
  /** The live fields of those of these devices it holds: what its `GetDevices` answers. */
  readonly live: (deviceIds: ReadonlyArray<string>) => Array<DeviceLive>
}

/**
 * The device buckets resident in this process (their entity is active here), for what reaches
 * every hosted device of an organisation: a rules change, announced to every process, is sent
 * only to the buckets each one hosts. A bucket not resident reads the rules when it activates.
 * The sweep of stored deadlines (`overdue.ts`) wakes the buckets not resident here in time.
 */
export class ResidentBuckets extends Context.Service<ResidentBuckets, {
  readonly add: (bucket: string, resident: Resident) => void
  readonly remove: (bucket: string) => void
  readonly list: () => ReadonlyArray<string>
  readonly get: (bucket: string) => Resident | undefined
  /** Devices held in memory by the buckets resident here (metrics, benchmarks). */
  readonly hostedDevices: () => number
}>()("voltaic/entities/ResidentBuckets") {
  static readonly layer = Layer.sync(ResidentBuckets, () => {
    const buckets = new Map<string, Resident>()
    return ResidentBuckets.of({
      add: (bucket, resident) => {
        buckets.set(bucket, resident)
      },
      remove: (bucket) => {
        buckets.delete(bucket)
      },
      list: () => [...buckets.keys()],
      get: (bucket) => buckets.get(bucket),
      hostedDevices: () => {
        let n = 0
        for (const resident of buckets.values()) n += resident.devices.size
        return n
      }
    })
  })
}

/**
 * The Space entities resident in this process, read in memory: what their `GetSpace` answers.
 * `GET /spaces` asked each space of a page through the cluster, ~45 µs of CPU per space even
 * when the entity lived in the same process (bench:rest), more than the rest of the list.
 */
export class ResidentSpaces extends Context.Service<ResidentSpaces, {
  readonly add: (spaceId: string, read: () => typeof SpaceLive.Type) => void
  readonly remove: (spaceId: string) => void
  readonly get: (spaceId: string) => (() => typeof SpaceLive.Type) | undefined
}>()("voltaic/entities/ResidentSpaces") {
  static readonly layer = Layer.sync(ResidentSpaces, () => {
    const spaces = new Map<string, () => typeof SpaceLive.Type>()
    return ResidentSpaces.of({
      add: (spaceId, read) => {
        spaces.set(spaceId, read)
      },
      remove: (spaceId) => {
        spaces.delete(spaceId)
      },
      get: (spaceId) => spaces.get(spaceId)
    })
  })
}
