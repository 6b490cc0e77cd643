import { Context, Effect, Layer, type Scope } from "effect"

/** What a committed write says about a device: it is alive, and (for events) what it sent. */
export interface DeviceActivity {
  readonly organisationId: string
  readonly deviceId: string
  readonly at: number
  readonly event?: { readonly id: string; readonly name: string; readonly data: unknown; readonly timestamp: number } | undefined
  /** A sign of life that stored nothing (an MQTT CONNECT or PINGREQ): the supervisor stores it. */
  readonly session?: true | undefined
}

/**
 * Whoever watches devices. `publish` takes an activity at once and never blocks (its mailbox
 * may be full: then it keeps the activity in a bounded, coalesced form — see the supervisor);
 * `offer`, for producers that can wait, suspends while the mailbox is full (back-pressure).
 */
export interface ActivitySubscriber {
  readonly publish: (activity: DeviceActivity) => void
  readonly offer?: ((activity: DeviceActivity) => Effect.Effect<void>) | undefined
}

/**
 * In-process notice of committed device activity, from `Ingest` (and MQTT sessions) to
 * whoever watches devices (the supervisor). Local on purpose: the process that ingests a
 * device's traffic watches it.
 */
export class Activity extends Context.Service<Activity, {
  /** Hands the activity over without waiting (the caller already answered its client). */
  publish(activity: DeviceActivity): void
  /** Hands the activity over, waiting while a subscriber's mailbox is full. */
  offer(activity: DeviceActivity): Effect.Effect<void>
  subscribe(handler: ((activity: DeviceActivity) => void) | ActivitySubscriber): Effect.Effect<void, never, Scope.Scope>
}>()("voltaic/ingest/Activity") {
  static readonly layer = Layer.sync(Activity, () => {
    const subscribers = new Set<ActivitySubscriber>()
    return Activity.of({
      publish: (activity) => {
        for (const subscriber of subscribers) subscriber.publish(activity)
      },
      offer: (activity) =>
        Effect.forEach(
          [...subscribers],
          (subscriber) => subscriber.offer === undefined ? Effect.sync(() => subscriber.publish(activity)) : subscriber.offer(activity),
          { discard: true }
        ),
      subscribe: (handler) => {
        const subscriber: ActivitySubscriber = typeof handler === "function" ? { publish: handler } : handler
        return Effect.acquireRelease(Effect.sync(() => subscribers.add(subscriber)), () => Effect.sync(() => subscribers.delete(subscriber))).pipe(
          Effect.asVoid
        )
      }
    })
  })
}
