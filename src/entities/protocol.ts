import { DateTime, PrimaryKey, Schema } from "effect"
import { ClusterSchema, DeliverAt, Entity } from "effect/cluster"
import { Rpc } from "effect/rpc"

/**
 * The messages of Voltaic's three entities, as Effect Schemas: any process may send them and an
 * entity may move between processes. Each entity's behaviour is in its own module
 * (`DeviceBucket.ts`, `Alert.ts`, `Space.ts`); this one is the contract between them.
 *
 * Persisted or volatile:
 * - volatile (lost if the owner dies before handling it): what the store re-derives — a sign of
 *   life (`devices.last_seen_at` is written in the same commit as the event, location or
 *   session sign: a device rehydrated from its snapshot catches up from the row) — and reads;
 * - persisted (stored by the cluster, delivered at least once to whichever process owns the
 *   entity then, deduplicated by primary key): the offline timer, alert transitions and the
 *   changes a space counts. A handler that is run again (its owner died before marking it
 *   processed) finds its effect already applied: keys and idempotent state make it harmless.
 */

// ---------------------------------------------------------------------------------------------
// Device buckets: one entity per bucket of devices (entity id `b<n>`), hosting each device's
// `deviceMachine`. Bucketing keeps a hosted device under 10 KB (the cluster costs ~14.5 KB per
// resident entity: docs/cluster-spike.md) and lets ingest send one message per bucket per batch.

export const BUCKETS = 1024

/** FNV-1a of the device id: stable across processes and releases (a bucket's id is its address). */
export const bucketOf = (deviceId: string): string => {
  let hash = 0x811c9dc5
  for (let i = 0; i < deviceId.length; i++) hash = Math.imul(hash ^ deviceId.charCodeAt(i), 0x01000193)
  return `b${(hash >>> 0) % BUCKETS}`
}

export const SeenEvent = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  data: Schema.Unknown,
  timestamp: Schema.Number
})

/** A committed sign of life of one device: an event (with what rules evaluate), a location, or a session sign. */
export const Sign = Schema.Struct({
  deviceId: Schema.String,
  organisationId: Schema.String,
  at: Schema.Number,
  event: Schema.optional(SeenEvent)
})
export type Sign = typeof Sign.Type

/** Signs of life of devices of one bucket, after their commit. Volatile (see above). */
export const Seen = Rpc.make("Seen", { payload: { signs: Schema.Array(Sign) } })

/**
 * A device's offline deadline: delivered by the cluster at `deadline`, to whichever runner owns
 * the bucket then (a restart or handover included). Keyed by device and deadline, so scheduling
 * the same deadline again (after a handover) stores one message.
 */
export class OfflineCheck extends Schema.Class<OfflineCheck>("voltaic/DeviceBucket/OfflineCheck")({
  deviceId: Schema.String,
  deadline: Schema.Number
}) {
  [PrimaryKey.symbol]() {
    return `${this.deviceId}@${this.deadline}`
  }
  [DeliverAt.symbol]() {
    return DateTime.makeUnsafe(this.deadline)
  }
}
export const CheckOffline = Rpc.make("CheckOffline", { payload: OfflineCheck }).annotate(ClusterSchema.Persisted, true)

/** What REST answers for a device from its owner. */
export const DeviceLive = Schema.Struct({
  deviceId: Schema.String,
  /** The machine's state: unknown, online, offline or unwatched. */
  state: Schema.String,
  isOnline: Schema.Boolean,
  lastSeenAt: Schema.NullOr(Schema.Number)
})
export type DeviceLive = typeof DeviceLive.Type

/** The live fields of some devices of the bucket (unknown ids are left out). Volatile. */
export const GetDevices = Rpc.make("GetDevices", {
  payload: { deviceIds: Schema.Array(Schema.String) },
  success: Schema.Array(DeviceLive)
})

/** The rules of an organisation changed: reconfigure its hosted devices. Volatile: a bucket reads rules when it activates. */
export const RulesChanged = Rpc.make("RulesChanged", { payload: { organisationId: Schema.String } })

export const DeviceBucket = Entity.make("DeviceBucket", [Seen, CheckOffline, GetDevices, RulesChanged])

// ---------------------------------------------------------------------------------------------
// Alerts: one entity per (rule, device) — the slot of that pair's open alert, hosting its
// `alertMachine`. Every transition of one pair's alerts is applied by one owner, in order.

export const alertEntityId = (ruleId: string, deviceId: string) => `${ruleId}/${deviceId}`

/** The condition of a rule holds: open an alert, or repeat the open one. `key` deduplicates a re-sent raise. */
export class Raise extends Schema.Class<Raise>("voltaic/Alert/Raise")({
  key: Schema.String,
  organisationId: Schema.String,
  at: Schema.Number,
  note: Schema.String,
  event: Schema.NullOr(SeenEvent)
}) {
  [PrimaryKey.symbol]() {
    return this.key
  }
}

/** The condition cleared (device back, value in range): resolves the open alert if its rule auto-resolves. */
export class Clear extends Schema.Class<Clear>("voltaic/Alert/Clear")({
  key: Schema.String,
  at: Schema.Number
}) {
  [PrimaryKey.symbol]() {
    return this.key
  }
}

export const AlertOutcome = Schema.Struct({
  /** The alert exists and belongs to this slot. */
  found: Schema.Boolean,
  /** This message moved it to resolved (false: it already was, or it was only acknowledged). */
  resolved: Schema.Boolean
})

export const RaiseAlert = Rpc.make("Raise", { payload: Raise }).annotate(ClusterSchema.Persisted, true)
export const ClearAlert = Rpc.make("Clear", { payload: Clear }).annotate(ClusterSchema.Persisted, true)
/** `PUT /alerts/{id}/resolve` with only `acknowledgedAt`. Persisted, answered after it is applied. */
export const Acknowledge = Rpc.make("Acknowledge", {
  payload: { alertId: Schema.String, at: Schema.Number },
  success: AlertOutcome
}).annotate(ClusterSchema.Persisted, true)
/** `PUT /alerts/{id}/resolve`. Persisted, answered after it is applied. */
export const Resolve = Rpc.make("Resolve", {
  payload: { alertId: Schema.String, at: Schema.Number },
  success: AlertOutcome
}).annotate(ClusterSchema.Persisted, true)

export const Alert = Entity.make("Alert", [RaiseAlert, ClearAlert, Acknowledge, Resolve])

// ---------------------------------------------------------------------------------------------
// Spaces: one entity per space (entity id = space id), hosting its `spaceMachine`: the live
// counts (devices online and offline, open alerts), timezone and alert recipients. Its state is
// a set per device and per alert, so a change applied twice counts once.

export const Liveness = Schema.Literals(["online", "offline", "other"])

/** A device of the space is now online, offline or neither, as of `at` (a later `at` wins). */
export class DeviceLiveness extends Schema.Class<DeviceLiveness>("voltaic/Space/DeviceLiveness")({
  deviceId: Schema.String,
  liveness: Liveness,
  at: Schema.Number
}) {
  [PrimaryKey.symbol]() {
    return `${this.deviceId}@${this.at}@${this.liveness}`
  }
}

/** An alert of a device of the space opened or closed (resolved or deleted). */
export class AlertChanged extends Schema.Class<AlertChanged>("voltaic/Space/AlertChanged")({
  alertId: Schema.String,
  deviceId: Schema.String,
  open: Schema.Boolean
}) {
  [PrimaryKey.symbol]() {
    return `${this.alertId}:${this.open ? "open" : "closed"}`
  }
}

export const SpaceLive = Schema.Struct({
  devicesOnline: Schema.Number,
  devicesOffline: Schema.Number,
  openAlerts: Schema.Number,
  timezone: Schema.String,
  recipients: Schema.Array(Schema.String)
})
export type SpaceLive = typeof SpaceLive.Type

export const LivenessChanged = Rpc.make("DeviceLiveness", { payload: DeviceLiveness }).annotate(ClusterSchema.Persisted, true)
export const AlertOpenedOrClosed = Rpc.make("AlertChanged", { payload: AlertChanged }).annotate(ClusterSchema.Persisted, true)
/**
 * The space's devices, settings or alert recipients were written (a device moved, was deleted or
 * created; the timezone or recipients changed): re-read them from the store. Persisted.
 */
export const Reseed = Rpc.make("Reseed", { payload: { at: Schema.Number } }).annotate(ClusterSchema.Persisted, true)
/** The counts, timezone and recipients. Volatile. */
export const GetSpace = Rpc.make("GetSpace", { success: SpaceLive })

export const Space = Entity.make("Space", [LivenessChanged, AlertOpenedOrClosed, Reseed, GetSpace])
