import { Context, Effect, Layer, Option, Schema, type Scope } from "effect"
import { AppConfig } from "../config.ts"
import { countBusControl, countBusDelivery } from "../metrics.ts"
import { makeNatsBus } from "./natsBus.ts"

/** A stored resource on its way to live subscribers: the MQTT topic and the JSON it delivers. */
export interface Delivery {
  readonly organisationId: string
  readonly deviceId: string
  readonly topic: string
  /** The stored resource as JSON text, exactly what subscribers receive. */
  readonly payload: string
}

/**
 * Cluster-wide notices: a credential stopped working, so caches and sessions must drop it; or
 * something an organisation's devices embed changed, so cached device reads must go.
 */
export type ControlMessage =
  | { readonly type: "credentials.changed" }
  | { readonly type: "devices.changed"; readonly organisationId: string }
  /** Signs of life that stored nothing (MQTT sessions) moved these devices' `lastSeenAt`. */
  | { readonly type: "devices.seen"; readonly deviceIds: ReadonlyArray<string> }
  /** These devices left their owner's memory, their rows written: their stored rows answer for them now. */
  | { readonly type: "devices.left"; readonly deviceIds: ReadonlyArray<string> }
  /**
   * An MQTT client id connected on the broker `origin` at `at` (epoch ms): a connection elsewhere
   * holding that id for the same principal since before then is closed, as aedes closes one
   * within a process [MQTT-3.1.4-2]. `at` is absent from brokers older than it (taken as newest).
   */
  | {
    readonly type: "mqtt.connected"
    readonly clientId: string
    readonly principal: string
    readonly origin: string
    readonly at?: number | undefined
  }
  /** Persistent MQTT sessions subscribed to these devices: every process queues their deliveries. */
  | { readonly type: "mqtt.subscribed"; readonly deviceIds: ReadonlyArray<string> }
  /** Alerts of these organisations were written without a delivery (notifications, device-less alerts, a resolve): their cached pages go. */
  | { readonly type: "alerts.changed"; readonly organisationIds: ReadonlyArray<string> }
  /** An organisation's command was renamed or deleted: the commands held for runs go. */
  | { readonly type: "commands.changed"; readonly organisationId: string }
  /** An organisation's alert rules were written: its cached rules and hosted devices follow. */
  | { readonly type: "rules.changed"; readonly organisationId: string }

export class BusUnreachable extends Schema.TaggedError<BusUnreachable>()("BusUnreachable", {
  setting: Schema.String,
  message: Schema.String
}) {}

export interface BusService {
  readonly kind: "memory" | "nats"
  /** False while the link to the other processes is lost (deliveries and notices are dropped meanwhile). */
  connected(): boolean
  /** Hands a delivery to every process; returns once it is on its way (at-most-once). */
  deliver(delivery: Delivery): Effect.Effect<void>
  /** `deliver` without an effect, for callers on a callback path (the ingest fast path). */
  send(delivery: Delivery): void
  /** Receives every delivery of every process, this one included, until the scope closes. */
  onDelivery(handler: (delivery: Delivery) => void): Effect.Effect<void, never, Scope.Scope>
  control(message: ControlMessage): Effect.Effect<void>
  onControl(handler: (message: ControlMessage) => void): Effect.Effect<void, never, Scope.Scope>
}

/** Handlers registered in this process: the in-memory bus, and the NATS bus while NATS is lost. */
export const makeLocalFanout = <A>() => {
  const handlers = new Set<(value: A) => void>()
  return {
    emit: (value: A) => {
      for (const handler of handlers) handler(value)
    },
    add: (handler: (value: A) => void) =>
      Effect.acquireRelease(Effect.sync(() => handlers.add(handler)), () => Effect.sync(() => handlers.delete(handler))).pipe(Effect.asVoid)
  }
}

export class Bus extends Context.Service<Bus, BusService>()("voltaic/bus/Bus") {
  /** One process: deliveries go straight to this process's handlers. */
  static readonly memory = Layer.sync(Bus, () => {
    const deliveries = makeLocalFanout<Delivery>()
    const controls = makeLocalFanout<ControlMessage>()
    return Bus.of({
      kind: "memory",
      connected: () => true,
      deliver: (delivery) => Effect.sync(() => deliveries.emit(delivery)),
      send: deliveries.emit,
      onDelivery: deliveries.add,
      control: (message) => Effect.sync(() => controls.emit(message)),
      onControl: controls.add
    })
  })

  /**
   * The in-memory bus, except that every control message is lost on the way: what core NATS
   * may do to any of them (tests of what must not depend on one arriving).
   */
  static readonly losingControl = Layer.effect(
    Bus,
    Effect.gen(function*() {
      const bus = yield* Bus
      return Bus.of({ ...bus, control: () => Effect.void })
    })
  ).pipe(Layer.provide(Bus.memory))

  /** NATS when `NATS_URL` is set, else in memory; its publishes counted (`voltaic_bus_publishes_total`). */
  static readonly layer = Layer.effect(
    Bus,
    Effect.map(Effect.service(Bus), (bus) =>
      Bus.of({
        ...bus,
        deliver: (delivery) => Effect.andThen(Effect.sync(countBusDelivery), bus.deliver(delivery)),
        send: (delivery) => {
          countBusDelivery()
          bus.send(delivery)
        },
        control: (message) => Effect.andThen(Effect.sync(countBusControl), bus.control(message))
      }))
  ).pipe(Layer.provide(Layer.unwrap(
    Effect.map(AppConfig, (config) =>
      Option.match(config.natsUrl, {
        onNone: () => Bus.memory,
        onSome: (url) => Layer.effect(Bus, makeNatsBus(url))
      })
    )
  )))
}
