import { Layer } from "effect"
import { AlertEntityLive } from "./Alert.ts"
import { SpaceLive } from "./Space.ts"

/**
 * Every entity this process can host (device buckets, alerts, spaces), registered with the
 * cluster's sharding: a process hosts those whose shards it owns.
 */
export const EntitiesLive = Layer.mergeAll(AlertEntityLive, SpaceLive)
