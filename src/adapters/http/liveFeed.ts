import { Effect, Fiber } from "effect"
import type { BusService, Delivery } from "../../bus/Bus.ts"

/** Deliveries of every process, shared by the open live streams of this one. */
export interface LiveFeed {
  /** Calls `listener` with every delivery until the returned function is called. */
  subscribe(listener: (delivery: Delivery) => void): () => void
}

/**
 * One bus subscription however many consoles are open (with NATS, one subscription to the
 * traffic subjects, not one per browser tab): taken when the first stream opens, dropped when the
 * last one closes.
 */
export const makeLiveFeed = (bus: BusService): LiveFeed => {
  const listeners = new Set<(delivery: Delivery) => void>()
  let fiber: Fiber.Fiber<never> | undefined
  const fanout = (delivery: Delivery) => {
    for (const listener of listeners) listener(delivery)
  }
  return {
    subscribe: (listener) => {
      listeners.add(listener)
      fiber ??= Effect.runFork(Effect.scoped(Effect.andThen(bus.onDelivery(fanout), Effect.never)))
      return () => {
        listeners.delete(listener)
        if (listeners.size > 0 || fiber === undefined) return
        Effect.runFork(Fiber.interrupt(fiber))
        fiber = undefined
      }
    }
  }
}
