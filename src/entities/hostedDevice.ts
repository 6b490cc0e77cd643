import type { AlertIntent } from "./deviceAlerts.ts"
import type { DeviceSnapshot, Raised } from "./deviceSteps.ts"
import type { DeviceLive, SeenEvent } from "./protocol.ts"
import type { Place } from "./rules.ts"

/** A device as its bucket hosts it (`deviceHost.ts`), what the host collects for the entity to perform, and the host itself. */
export type Liveness = "online" | "offline" | "other"
export const livenessOf = (value: unknown): Liveness => (value === "online" ? "online" : value === "offline" ? "offline" : "other")

/** A device's row in `device_actors`, and what its `devices` row says (activation). */
export interface Activation {
  readonly deviceId: string
  readonly place: Place
  /** `device_seen.last_seen_at`: every committed sign of life, told or not. */
  readonly lastSeenAt: number | null
  readonly snapshot: unknown
  readonly wakeAt: number | null
  readonly liveness: Liveness
  readonly livenessAt: number
  /** Rules for which the device has an open alert. */
  readonly raised: ReadonlyArray<string>
}

export interface Effects {
  /** The earliest deadline set since the last drain; null: none. */
  wake: number | null
  readonly alerts: Array<AlertIntent>
  /** Devices whose liveness left what their row will say (`planned`): stored, then told to their space. */
  readonly liveness: Map<HostedDevice, { readonly liveness: Liveness; readonly at: number }>
}

/**
 * The machine's offline timer: the event it raised, fired back into it at `deadline`; or, while
 * offline, the host's own for a longer offline rule's limit (`raised.id` `OVERDUE`).
 */
export interface Timer {
  readonly raised: Raised
  readonly device: HostedDevice
  deadline: number
}

export class HostedDevice {
  timer: Timer | undefined = undefined
  /**
   * Offline: the longest limit told so far in this offline period (`device.offline`'s `afterMs`);
   * the host's timer (`OVERDUE`) waits for the next longer offline rule's. Null otherwise.
   */
  overdueMs: number | null = null
  /**
   * Offline: when the latest limit told in this offline period passed (its alerts' `firstSeenAt`).
   * A sign of life dated before it but told after it (its commit came after the owner read the
   * device's row) brings the device back as of then, so that the clear is not older than the alerts.
   */
  offlineAt: number | null = null
  /** Newest sign of life not told to the machine yet. */
  noted: number | null = null
  rulesVersion = -1
  /** Its snapshot changed in a way the rows do not re-derive (baselines): written behind. */
  dirty = false
  /** The deadline its row holds (`device_actors.wake_at`), as last read or written. */
  storedWakeAt: number | null
  /**
   * Its liveness as of its last step whose rows were captured (what its row will say once the
   * steps queued in its bucket's outbox are performed), and as of when: a step's liveness
   * changes are counted against it.
   */
  planned: Liveness
  plannedAt: number
  /** Rows of it captured and not written yet. */
  pending = 0
  constructor(
    readonly id: string,
    /** Its machine's state (`deviceSteps.ts`): replaced by each step. */
    public snapshot: DeviceSnapshot,
    public place: Place,
    /**
     * Its deadline (null: no timer), as of its machine's last step: a sign of life noted since
     * only moves it later. Its row's (`storedWakeAt`) may be earlier, never later.
     */
    public wakeAt: number | null,
    /** Liveness as stored in its row (what its space counts), and as of when. */
    public reported: Liveness,
    public reportedAt: number,
    /** Rules for which it may have an open alert (threshold and anomaly). */
    public raised: Array<string>,
    public lastActiveAt: number
  ) {
    this.storedWakeAt = wakeAt
    this.planned = reported
    this.plannedAt = reportedAt
  }
}

/** The devices of one bucket and their machines, without I/O (`makeDeviceHost`, `deviceHost.ts`). */
export type SeenEventValue = typeof SeenEvent.Type

export interface DeviceHost {
  readonly devices: ReadonlyMap<string, HostedDevice>
  activate(activation: Activation, now: number): HostedDevice
  /** A committed sign of life, with the event rules may evaluate. */
  seen(device: HostedDevice, at: number, event: SeenEventValue | undefined, now: number): void
  /** The bucket's timer or a wake-up arrived: every deadline due at `now` fires. */
  wake(now: number): void
  /**
   * The device's deadlines due at `now` fire, as `wake` fires every device's (a bucket fires
   * those `due` found one by one, yielding between them); a device forgotten meanwhile is skipped.
   */
  fireDue(device: HostedDevice, now: number): void
  /** The earliest deadline of the devices held; undefined: none. */
  nextDeadline(): number | undefined
  /** Devices whose deadline is due at `now` (their rows may hold signs of life not told yet). */
  due(now: number): Array<HostedDevice>
  /**
   * A sign of life read from the device's row: noted (told before its deadline fires); one newer
   * than the deadline moves it (the row cannot show a gap: it keeps only the newest sign).
   */
  caughtUp(device: HostedDevice, lastSeenAt: number | null): void
  /** Re-derives the device's settings from its organisation's rules if they changed. */
  configure(device: HostedDevice, now: number): void
  live(device: HostedDevice): DeviceLive
  forget(deviceId: string): void
  /**
   * Devices whose deadline may differ from the one their row holds (`wakeAt` against
   * `storedWakeAt`): every device whose machine moved its deadline is added; the bucket takes out
   * those it finds in step with their row.
   */
  readonly unsynced: Set<HostedDevice>
  /** Devices idle since `before`, not online and without a deadline, leave memory. */
  sweep(before: number): ReadonlyArray<HostedDevice>
  /** The effects collected since the last drain. */
  drain(): Effects
}

/** The id of the host's timer for a longer offline rule's limit (the machine's own have others). */
export const OVERDUE = "voltaic.overdue"
