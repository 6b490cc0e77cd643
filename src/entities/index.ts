import { Layer } from "effect"

/**
 * Every entity this process can host (device buckets, alerts, spaces), registered with the
 * cluster's sharding: a process hosts those whose shards it owns.
 */
export const EntitiesLive = Layer.empty
