import { connect, type NatsConnection } from "@nats-io/transport-node"
import { Effect, FiberSet } from "effect"
import { makeOutage } from "../domain/outage.ts"
import { BusUnreachable, type BusService, type ControlMessage, type Delivery, makeLocalFanout } from "./Bus.ts"
import { CONTROL_SUBJECT, TRAFFIC_WILDCARD, trafficSubject } from "./topics.ts"

const encoder = new TextEncoder()
const decoder = new TextDecoder()

export interface NatsBusOptions {
  /**
   * The wait between two attempts to reconnect. Each attempt against a server that is down is
   * a refused TCP connection; what is published meanwhile is dropped, not queued.
   */
  readonly reconnectTimeWaitMs: number
}

const defaultOptions: NatsBusOptions = { reconnectTimeWaitMs: 500 }

/**
 * Core NATS (at-most-once) carries live deliveries between processes: what was acknowledged
 * to a device is already in the store, so a delivery lost with a process is not data lost.
 * While the connection is lost, deliveries and notices go to this process's own handlers only
 * (as NATS would have echoed them back here) and are not left to nats.js, which buffers them
 * without bound and discards them at its next attempt anyway: a subscriber on the process that
 * ingested an event still receives it, one on another process does not.
 */
export const makeNatsBus = Effect.fnUntraced(function*(url: string, options: Partial<NatsBusOptions> = {}) {
  const { reconnectTimeWaitMs } = { ...defaultOptions, ...options }
  const run = yield* FiberSet.makeRuntime<never>()
  const outage = makeOutage({
    lost: (reason) => `bus: lost NATS (${reason})`,
    restored: (seconds) => `bus: reconnected to NATS after ${seconds} s`
  }, {
    warn: (message) => void run(Effect.logWarning(message)),
    info: (message) => void run(Effect.logInfo(message))
  })
  const nc = yield* Effect.acquireRelease(
    Effect.tryPromise({
      try: () =>
        connect({ servers: url, name: "voltaic", maxReconnectAttempts: -1, reconnectTimeWait: reconnectTimeWaitMs }),
      catch: (cause) =>
        new BusUnreachable({
          setting: "NATS_URL",
          message: `cannot reach NATS at ${url}: ${cause instanceof Error ? cause.message : String(cause)}`
        })
    }),
    (nc: NatsConnection) => Effect.promise(() => nc.drain()).pipe(Effect.ignore)
  )
  // nats.js reports one `disconnect` per lost connection and one `reconnect` when an attempt
  // succeeds (its subscriptions are then renewed); the iterator ends when the connection closes.
  void (async () => {
    let lastError: string | undefined
    for await (const status of nc.status()) {
      if (status.type === "error") lastError = status.error.message
      else if (status.type === "disconnect") outage.lost(`disconnected from ${status.server}${lastError ? `: ${lastError}` : ""}`)
      else if (status.type === "reconnect") {
        lastError = undefined
        outage.restored(outage.epoch)
      }
    }
  })()

  const subscribe = <A>(subject: string, decode: (text: string) => A, handler: (value: A) => void) =>
    Effect.acquireRelease(
      Effect.sync(() =>
        nc.subscribe(subject, {
          callback: (err, msg) => {
            if (err) return
            let value: A
            try {
              value = decode(decoder.decode(msg.data))
            } catch {
              return // not ours: ignore a malformed message rather than stop the subscription
            }
            handler(value)
          }
        })
      ),
      (sub) => Effect.sync(() => sub.unsubscribe())
    ).pipe(Effect.asVoid)

  /**
   * Never throws: callers are on the writer's acknowledgement path. nats.js throws once the
   * connection is closed or draining (shutdown) and for a message over the server's
   * max_payload; such a delivery is dropped like one published during an outage.
   */
  const publish = (subject: string, text: string) => {
    try {
      nc.publish(subject, encoder.encode(text))
    } catch (cause) {
      if (!nc.isClosed() && !nc.isDraining()) {
        run(Effect.logWarning(`bus: a message on ${subject} was dropped: ${cause instanceof Error ? cause.message : String(cause)}`))
      }
    }
  }
  const localDeliveries = makeLocalFanout<Delivery>()
  const localControls = makeLocalFanout<ControlMessage>()
  const send = (delivery: Delivery) =>
    outage.down ? localDeliveries.emit(delivery) : publish(trafficSubject(delivery.deviceId), JSON.stringify(delivery))

  const bus: BusService = {
    kind: "nats",
    connected: () => !outage.down,
    deliver: (delivery) => Effect.sync(() => send(delivery)),
    send,
    onDelivery: (handler) =>
      Effect.andThen(subscribe(TRAFFIC_WILDCARD, (text) => JSON.parse(text) as Delivery, handler), localDeliveries.add(handler)),
    control: (message) =>
      Effect.sync(() => outage.down ? localControls.emit(message) : publish(CONTROL_SUBJECT, JSON.stringify(message))),
    onControl: (handler) =>
      Effect.andThen(subscribe(CONTROL_SUBJECT, (text) => JSON.parse(text) as ControlMessage, handler), localControls.add(handler))
  }
  return bus
})
