import { Layer } from "effect"
import { AlertEntityLive } from "./AlertBucket.ts"
import { DeviceBucketLive } from "./DeviceBucket.ts"
import { DeviceOwners } from "./DeviceOwners.ts"
import { OverdueDevicesLive } from "./overdue.ts"
import { ResidentBuckets, ResidentSpaces } from "./residents.ts"
import { Rules } from "./rules.ts"
import { SeenSenderLive } from "./SeenSender.ts"
import { SpaceLive } from "./Space.ts"
import { SpaceChanges } from "./spaceChanges.ts"

/**
 * Every entity this process can host (device buckets, alerts, spaces), registered with the
 * cluster's sharding: a process hosts those whose shards it owns. With them, what reaches
 * them from here: signs of life after their commit (`SeenSender`), live reads and rules
 * changes (`DeviceOwners`); and the sweep of the deadlines stored for the buckets it owns
 * (`overdue.ts`).
 */
export const EntitiesLive = Layer.mergeAll(AlertEntityLive, SpaceLive, DeviceBucketLive, OverdueDevicesLive, DeviceOwners.layer, SeenSenderLive).pipe(
  Layer.provideMerge(Layer.mergeAll(Rules.layer, ResidentBuckets.layer, ResidentSpaces.layer, SpaceChanges.layer))
)
