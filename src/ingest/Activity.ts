import { Context, Effect, Layer, type Scope } from "effect"

/** What a committed write says about a device: it is alive, and (for events) what it sent. */
export interface DeviceActivity {
  readonly organisationId: string
  readonly deviceId: string
  readonly at: number
  readonly event?: { readonly id: string; readonly name: string; readonly data: unknown; readonly timestamp: number } | undefined
  /** A sign of life that stored nothing (an MQTT CONNECT or PINGREQ): stored before it is sent on. */
  readonly session?: true | undefined
}

/**
 * Whoever passes activity on. `publish` takes an activity at once and never blocks (what it
 * cannot pass on yet it keeps in a bounded, coalesced form: src/entities/SeenSender.ts);
 * `offer`, for producers that can wait (an MQTT CONNECT), suspends until the subscriber took
 * it in hand (a session sign: until it is stored).
 */
export interface ActivitySubscriber {
  readonly publish: (activity: DeviceActivity) => void
  readonly offer?: ((activity: DeviceActivity) => Effect.Effect<void>) | undefined
}

/**
 * In-process notice of committed device activity, from `Ingest` (and MQTT sessions) to what
 * sends it to the owner of each device, wherever that runs (`SeenSender`, through the
 * cluster). Nothing here assumes the device's owner is this process.
 */
export class Activity extends Context.Service<Activity, {
  /** Hands the activity over without waiting (the caller already answered its client). */
  publish(activity: DeviceActivity): void
  /** Hands the activity over, waiting until every subscriber took it in hand. */
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
