import { Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import mqtt, { type MqttClient } from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MqttBroker } from "../../src/adapters/mqtt/MqttBroker.ts"
import { Auth } from "../../src/auth/Auth.ts"
import { Bus } from "../../src/bus/Bus.ts"
import { Unauthorized } from "../../src/domain/errors.ts"
import { type EventJson, Ingest } from "../../src/ingest/Ingest.ts"
import { Sql, SqlError } from "../../src/store/Sql.ts"
import { connected, duplexPair, within } from "../support/mqtt.ts"

const DEVICE_KEY = "d_sk_fake"
const DEVICE = { kind: "device", id: "dev_fake", organisationId: "org_fake" } as const

/** The broker over fakes whose store is lost: every write fails as a terminated connection does. */
describe("MQTT publishes while the store is lost", () => {
  let scope: Scope.Closeable
  let broker: MqttBroker["Service"]
  let release: () => void = () => {}
  let reached = 0
  const logs: Array<string> = []

  beforeAll(async () => {
    const gate = new Promise<void>((resolve) => (release = resolve))
    const AuthFake = Layer.succeed(Auth, Auth.of({
      authenticate: (secret) => secret === DEVICE_KEY ? Effect.succeed(DEVICE) : Effect.fail(new Unauthorized({ message: "unknown" })),
      forget: () => Effect.void,
      onCredentialsChanged: () => Effect.void
    }))
    const lost = new SqlError({ code: "57P01", message: "terminating connection due to administrator command", cause: undefined })
    const IngestFake = Layer.succeed(Ingest, Ingest.of({
      event: () =>
        Effect.andThen(Effect.sync(() => reached++), Effect.promise(() => gate)).pipe(
          Effect.andThen(Effect.fail(lost)),
          Effect.as<EventJson>({ id: "evt_1", name: "x", data: null, timestamp: 0, device: { id: DEVICE.id } })
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
      Layer.provide(Logger.layer([Logger.make(({ message }) => logs.push(String(message)))]))
    )
    broker = Context.get(await Effect.runPromise(Layer.buildWithScope(layer, scope)), MqttBroker)
  })
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

  it("closes the connection unacknowledged and logs it once, however many of its publishes were waiting", async () => {
    const client: MqttClient = new mqtt.MqttClient(() => {
      const [near, far] = duplexPair()
      broker.handle(far)
      return near
    }, { username: DEVICE_KEY, reconnectPeriod: 0, protocolVersion: 4 })
    await connected(client)
    const closed = new Promise<void>((resolve) => client.once("close", () => resolve()))
    let acknowledged = 0
    for (let i = 0; i < 5; i++) client.publish("events", JSON.stringify({ name: "x", data: i }), { qos: 1 }, (e) => e || acknowledged++)
    for (let i = 0; i < 100 && reached < 5; i++) await new Promise((r) => setTimeout(r, 10))
    expect(reached).toBe(5)
    release()
    await within(closed, "the connection to close")
    expect(acknowledged).toBe(0)
    expect(logs.filter((l) => l.includes("not stored"))).toHaveLength(1)
    await client.endAsync(true)
  })
})
