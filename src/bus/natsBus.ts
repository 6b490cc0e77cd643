import { connect, type NatsConnection } from "@nats-io/transport-node"
import { Effect } from "effect"
import { BusUnreachable, type BusService, type ControlMessage, type Delivery } from "./Bus.ts"
import { CONTROL_SUBJECT, TRAFFIC_WILDCARD, trafficSubject } from "./topics.ts"

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/**
 * Core NATS (at-most-once) carries live deliveries between processes: what was acknowledged
 * to a device is already in the store, so a delivery lost with a process is not data lost.
 */
export const makeNatsBus = (url: string) =>
  Effect.gen(function*() {
    const nc = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => connect({ servers: url, name: "voltaic", maxReconnectAttempts: -1 }),
        catch: (cause) =>
          new BusUnreachable({
            setting: "NATS_URL",
            message: `cannot reach NATS at ${url}: ${cause instanceof Error ? cause.message : String(cause)}`
          })
      }),
      (nc: NatsConnection) => Effect.promise(() => nc.drain()).pipe(Effect.ignore)
    )

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

    const send = (delivery: Delivery) => nc.publish(trafficSubject(delivery.deviceId), encoder.encode(JSON.stringify(delivery)))

    const bus: BusService = {
      kind: "nats",
      deliver: (delivery) => Effect.sync(() => send(delivery)),
      send,
      onDelivery: (handler) => subscribe(TRAFFIC_WILDCARD, (text) => JSON.parse(text) as Delivery, handler),
      control: (message) => Effect.sync(() => nc.publish(CONTROL_SUBJECT, encoder.encode(JSON.stringify(message)))),
      onControl: (handler) => subscribe(CONTROL_SUBJECT, (text) => JSON.parse(text) as ControlMessage, handler)
    }
    return bus
  })
