import { Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import mqtt, { type MqttClient } from "mqtt"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { MqttBroker } from "../../src/adapters/mqtt/MqttBroker.ts"
import { Auth } from "../../src/auth/Auth.ts"
import { Bus } from "../../src/bus/Bus.ts"
import { Unauthorized, Unavailable } from "../../src/domain/errors.ts"
import { type EventJson, Ingest, type IngestError } from "../../src/ingest/Ingest.ts"
import { Sql, SqlError } from "../../src/store/Sql.ts"
import { closedBy, connected, duplexPair, within } from "../support/mqtt.ts"

const DEVICE_KEY = "d_sk_fake"
const DEVICE = { kind: "device", id: "dev_fake", organisationId: "org_fake" } as const

/** The broker over fakes: the ingest service answers what each test scripts. */
describe("MQTT publish acknowledgement", () => {
  let scope: Scope.Closeable
  let broker: MqttBroker["Service"]
  let store: (attempt: number) => Effect.Effect<void, IngestError>
  let attempts: number
  let client: MqttClient | undefined

  beforeEach(async () => {
    attempts = 0
    const AuthFake = Layer.succeed(Auth, Auth.of({
      authenticate: (secret) => secret === DEVICE_KEY ? Effect.succeed(DEVICE) : Effect.fail(new Unauthorized({ message: "unknown" })),
      forget: () => Effect.void,
      onCredentialsChanged: () => Effect.void
    }))
    const IngestFake = Layer.succeed(Ingest, Ingest.of({
      event: (envelope) =>
        Effect.suspend(() => store(++attempts)).pipe(
          Effect.as<EventJson>({ id: "evt_1", name: envelope.payload.name, data: null, timestamp: 0, device: { id: DEVICE.id } })
        ),
      location: () => Effect.die("not used"),
      runCommand: () => Effect.die("not used"),
      submitEvent: () => false,
      commandsChanged: () => Effect.void,
      forgetDevices: () => {}
    }))
    const SqlFake = Layer.succeed(Sql, {
      dialect: "pglite",
      // No persistent MQTT session is stored (a CONNECT looks for one); nothing else is read.
      query: <T>(text: string) => text.includes("mqtt_") ? Effect.succeed<Array<T>>([]) : Effect.die("not used"),
      exec: () => Effect.die("not used"),
      write: () => Effect.die("not used"),
      transaction: () => Effect.die("not used"),
      script: () => Effect.die("not used")
    })
    scope = await Effect.runPromise(Scope.make())
    const layer = MqttBroker.layer.pipe(
      Layer.provide(Layer.mergeAll(AuthFake, IngestFake, SqlFake, Bus.memory)),
      Layer.provide(Logger.layer([]))
    )
    const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
    broker = Context.get(context, MqttBroker)
  })
  afterEach(async () => {
    await client?.endAsync(true)
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  const connect = () => {
    client = new mqtt.MqttClient(() => {
      const [near, far] = duplexPair()
      broker.handle(far)
      return near
    }, { username: DEVICE_KEY, reconnectPeriod: 0, protocolVersion: 4 })
    return connected(client)
  }

  it("sends the PUBACK only once the ingest service reports the row committed", async () => {
    let commit: () => void = () => {}
    const committed = new Promise<void>((resolve) => (commit = resolve))
    let reached: () => void = () => {}
    const inStore = new Promise<void>((resolve) => (reached = resolve))
    store = () => Effect.andThen(Effect.sync(reached), Effect.promise(() => committed))
    const device = await connect()
    let acknowledged = false
    const publish = device.publishAsync("events", JSON.stringify({ name: "x", data: 1 }), { qos: 1 }).then(() => (acknowledged = true))
    await within(inStore, "the ingest call")
    // Give a PUBACK every chance to overtake the commit.
    for (let i = 0; i < 10; i++) await new Promise((resolve) => setImmediate(resolve))
    expect(acknowledged).toBe(false)
    commit()
    await within(publish, "the PUBACK")
    expect(acknowledged).toBe(true)
  })

  it("retries while the store is behind, delaying the PUBACK instead of losing the message", async () => {
    store = (attempt) => attempt <= 3 ? Effect.fail(new Unavailable({ retryAfterSeconds: 1, message: "behind" })) : Effect.void
    const device = await connect()
    await within(device.publishAsync("events", JSON.stringify({ name: "x", data: 1 }), { qos: 1 }), "the PUBACK")
    expect(attempts).toBe(4)
    expect(device.connected).toBe(true)
  })

  it("closes the connection without a PUBACK when the store fails, so the client sends again", async () => {
    store = () => Effect.fail(new SqlError({ message: "disk full", cause: undefined }))
    const device = await connect()
    let acknowledged = false
    device.publish("events", JSON.stringify({ name: "x", data: 1 }), { qos: 1 }, () => (acknowledged = true))
    await closedBy(device)
    expect(acknowledged).toBe(false)
    expect(attempts).toBe(1)
  })
})
