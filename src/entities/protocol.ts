import { Schema } from "effect"
import { ClusterSchema, Entity } from "effect/cluster"
import { Rpc } from "effect/rpc"

/**
 * The messages of Voltaic's three entities, as Effect Schemas: any process may send them and an
 * entity may move between processes. Each entity's behaviour is in its own module
 * (`DeviceBucket.ts`, `AlertBucket.ts`, `Space.ts`); this one is the contract between them.
 *
 * Persisted or volatile:
 * - persisted (stored by the cluster, delivered at least once to whichever process owns the
 *   entity then): REST's acknowledge and resolve, space reseeds;
 * - volatile: what the store re-derives — a sign of life (`device_seen.last_seen_at` is written in
 *   the same commit as the event, location or session sign: a device rehydrated from its
 *   snapshot catches up from the row), an offline deadline (`device_actors.wake_at`, swept for
 *   the overdue ones: `Wake`) — reads, and the effects of a device bucket's step on its alerts
 *   (`Apply`) and spaces (`Changes`): batched per step, awaited by the step, which is run again
 *   when they do not all complete (the deadline stays in the rows until the step wrote them).
 *   Applying them twice is harmless: per-slot `at`, per-device `at`, sets.
 */

// ---------------------------------------------------------------------------------------------
// Device buckets: one entity per bucket of devices (entity id `b<n>`), hosting each device's
// `deviceMachine`. Bucketing keeps a hosted device under 10 KB (the cluster costs ~14.5 KB per
// resident entity: docs/cluster-spike.md) and lets ingest send one message per bucket per batch.
//
// 64 buckets: every message to a bucket and every step of one has a fixed cost (the cluster's
// envelope, mailbox and reply; a step's statements and its messages to alerts and spaces), so
// fewer, fuller buckets cost less per event and per alert. Measured on 2 cores (bench/RESULTS.md,
// 2026-11-26): MQTT QoS 1 ingest 57 µs of server CPU per event with 1,024 buckets, 52 with 256,
// 35–46 with 64; 10,000 devices silent at once, offline-alert p99 3.2 s, 2.2 s and 1.07 s. 64
// still spreads over the cluster's 300 shards and a few dozen processes. Changing it moves every
// device to another bucket: a migration recomputes `device_actors.bucket` (0014).

export const BUCKETS = 64

/** FNV-1a of the device id: the same in every process (a bucket's id is its address). */
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
 * A bucket's wake-up from the sweep of stored deadlines (`overdue.ts`): some of its devices' rows
 * hold a deadline (`device_actors.wake_at`) due soon and the bucket has not read them (it is new
 * to this process: a restart, a handover), or one that passed without their owner handling it.
 * The bucket reads them, and every deadline due fires. Volatile: the deadline stays in the rows,
 * and the next sweep sends it again.
 */
export const Wake = Rpc.make("Wake", { payload: { at: Schema.Number } })

/**
 * The bucket's own timer at its earliest deadline, sent by the bucket to itself (volatile): the
 * owner that set a deadline fires it on time. Lost with its owner, whose devices' rows keep the
 * deadline for the next one (`Wake`).
 */
export const Tick = Rpc.make("Tick", { payload: { at: Schema.Number } })

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

/**
 * The rules of an organisation changed: reconfigure its hosted devices; with `deviceIds`, only
 * those moved (space, product) and the rules the same. Volatile: a bucket reads rules and places
 * when it activates.
 */
export const RulesChanged = Rpc.make("RulesChanged", {
  payload: { organisationId: Schema.String, deviceIds: Schema.optional(Schema.Array(Schema.String)) }
})

export const DeviceBucket = Entity.make("DeviceBucket", [Seen, Wake, Tick, GetDevices, RulesChanged])

// ---------------------------------------------------------------------------------------------
// Alerts: one entity per device bucket (entity id = the bucket's, `bucketOf(deviceId)`: the same
// shard as the device bucket), hosting the `alertMachine` of each (rule, device) slot of its
// devices. Every transition of a slot's alerts is applied by one owner, in order.

export const alertBucketOf = (deviceId: string | null) => bucketOf(deviceId ?? "")

/** The condition of a rule holds (`raise`: open an alert, or repeat the open one), or cleared (`clear`: auto-resolve). */
export const AlertIntent = Schema.Struct({
  kind: Schema.Literals(["raise", "clear"]),
  ruleId: Schema.String,
  deviceId: Schema.String,
  organisationId: Schema.String,
  at: Schema.Number,
  note: Schema.String,
  event: Schema.NullOr(SeenEvent),
  /** Of a clear: whether the rule resolves its alerts when the condition clears (as the sender holds the rule). */
  autoResolve: Schema.Boolean
})
export type AlertIntent = typeof AlertIntent.Type

export const AlertOutcome = Schema.Struct({
  /** The alert exists and belongs to this slot. */
  found: Schema.Boolean,
  /** This message moved it to resolved (false: it already was, or it was only acknowledged). */
  resolved: Schema.Boolean
})

/**
 * The raises and clears of one device-bucket step, in order. Volatile, and awaited by the step
 * that sends it: a step whose effects are not all done is run again (its deadlines stay in the
 * rows; a sign of life is in `device_seen.last_seen_at`), and a slot applies a raise no
 * later than what it has seen, or a clear of an alert not open, as nothing.
 */
export const Apply = Rpc.make("Apply", { payload: { intents: Schema.Array(AlertIntent) } })
const ByIdPayload = { alertId: Schema.String, ruleId: Schema.String, deviceId: Schema.String, at: Schema.Number }
/** `PUT /alerts/{id}/resolve` with only `acknowledgedAt`. Persisted, answered after it is applied. */
export const Acknowledge = Rpc.make("Acknowledge", { payload: ByIdPayload, success: AlertOutcome }).annotate(ClusterSchema.Persisted, true)
/** `PUT /alerts/{id}/resolve`. Persisted, answered after it is applied. */
export const Resolve = Rpc.make("Resolve", { payload: ByIdPayload, success: AlertOutcome }).annotate(ClusterSchema.Persisted, true)

export const AlertBucket = Entity.make("AlertBucket", [Apply, Acknowledge, Resolve])

// ---------------------------------------------------------------------------------------------
// Spaces: one entity per space (entity id = space id), hosting its `spaceMachine`: the live
// counts (devices online and offline, open alerts), timezone and alert recipients. Its state is
// a set per device and per alert, so a change applied twice counts once.

export const Liveness = Schema.Literals(["online", "offline", "other"])

/** A device of the space is now online, offline or neither, as of `at` (a later `at` wins). */
export const DeviceLiveness = Schema.Struct({ deviceId: Schema.String, liveness: Liveness, at: Schema.Number })
export type DeviceLiveness = typeof DeviceLiveness.Type

/** An alert of a device of the space is open, or closed (resolved or deleted). */
export const AlertChanged = Schema.Struct({ alertId: Schema.String, deviceId: Schema.String, open: Schema.Boolean })
export type AlertChanged = typeof AlertChanged.Type

export const SpaceLive = Schema.Struct({
  devicesOnline: Schema.Number,
  devicesOffline: Schema.Number,
  openAlerts: Schema.Number,
  timezone: Schema.String,
  recipients: Schema.Array(Schema.String)
})
export type SpaceLive = typeof SpaceLive.Type

/**
 * What one step of a device or alert bucket changed in the space: devices' liveness and alerts
 * opened or closed. Volatile, awaited by the step (run again if it does not complete); applied
 * twice it counts once.
 */
export const Changes = Rpc.make("Changes", {
  payload: { devices: Schema.Array(DeviceLiveness), alerts: Schema.Array(AlertChanged) }
})
/**
 * The space's devices, settings or alert recipients were written (a device moved, was deleted or
 * created; the timezone or recipients changed): re-read them from the store. Persisted.
 */
export const Reseed = Rpc.make("Reseed", { payload: { at: Schema.Number } }).annotate(ClusterSchema.Persisted, true)
/** The counts, timezone and recipients. Volatile. */
export const GetSpace = Rpc.make("GetSpace", { success: SpaceLive })

export const Space = Entity.make("Space", [Changes, Reseed, GetSpace])
