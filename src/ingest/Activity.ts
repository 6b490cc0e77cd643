import { Context, Effect, Layer, type Scope } from "effect"

/** What a committed write says about a device: it is alive, and (for events) what it sent. */
export interface DeviceActivity {
  readonly organisationId: string
  readonly deviceId: string
  readonly at: number
  readonly event?: { readonly id: string; readonly name: string; readonly data: unknown; readonly timestamp: number } | undefined
}

/**
 * In-process notice of committed device activity, from `Ingest` to whoever watches devices
 * (the supervisor). Local on purpose: the process that ingests a device's traffic watches it.
 */
export class Activity extends Context.Service<Activity, {
  publish(activity: DeviceActivity): void
  subscribe(handler: (activity: DeviceActivity) => void): Effect.Effect<void, never, Scope.Scope>
}>()("voltaic/ingest/Activity") {
  static readonly layer = Layer.sync(Activity, () => {
    const handlers = new Set<(activity: DeviceActivity) => void>()
    return Activity.of({
      publish: (activity) => {
        for (const handler of handlers) handler(activity)
      },
      subscribe: (handler) =>
        Effect.acquireRelease(Effect.sync(() => handlers.add(handler)), () => Effect.sync(() => handlers.delete(handler))).pipe(Effect.asVoid)
    })
  })
}
