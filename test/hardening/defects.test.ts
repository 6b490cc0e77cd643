import { ConfigProvider, Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import mqtt from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { MqttBroker } from "../../src/adapters/mqtt/MqttBroker.ts"
import { CoreLive } from "../../src/app.ts"
import { Ingest, type IngestService } from "../../src/ingest/Ingest.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"
import { closedBy, connected, duplexPair, type LogLine, subscribe, WAIT_MS } from "../support/mqtt.ts"

/**
 * A defect in one connection's handler (a bug of ours, whatever the input) is logged with its
 * cause and closes at most that connection (issue 15, "No input ends the process"): here an
 * Ingest whose every path throws, as `JSON.stringify` did on deep data.
 */
const bug = () => new RangeError("Maximum call stack size exceeded")
const faulty: IngestService = {
  event: () => Effect.die(bug()),
  location: () => Effect.die(bug()),
  runCommand: () => Effect.sync(() => {
    throw bug()
  }),
  submitEvent: () => {
    throw bug()
  },
  commandsChanged: () => Effect.void,
  forgetDevices: () => undefined
}

describe("a defect while serving one connection", () => {
  const logs: Array<LogLine> = []
  let scope: Scope.Closeable
  let broker: Context.Service.Shape<typeof MqttBroker>
  let request: (path: string, body: unknown) => Promise<Response>

  beforeAll(async () => {
    scope = await Effect.runPromise(Scope.make())
    const capture = Logger.make<unknown, void>(({ logLevel, message, cause }) => {
      const parts = Array.isArray(message) ? message : [message]
      logs.push({ level: logLevel, message: `${parts.map(String).join(" ")} ${String(cause)}` })
    })
    const layer = MqttBroker.layer.pipe(
      Layer.provide(Layer.succeed(Ingest, faulty)),
      Layer.provideMerge(CoreLive),
      // Merged, so that the HTTP app's own runs log through it too.
      Layer.provideMerge(Logger.layer([capture])),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({
        DATABASE_URL: "memory://",
        BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
        ADMIN_EMAIL,
        ADMIN_PASSWORD,
        LOG_LEVEL: "warn"
      })))
    )
    const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
    broker = Context.get(context, MqttBroker)
    const app = await Effect.runPromise(Effect.provideContext(makeHttpApp, Context.add(context, Ingest, faulty)))
    request = async (path, body) =>
      await app.request(`/v1${path}`, { method: "POST", body: JSON.stringify(body), headers: { authorization: `Bearer ${BOOTSTRAP_KEY}`, "content-type": "application/json" } })
  })
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

  const connectInMemory = () =>
    connected(
      new mqtt.MqttClient(() => {
        const [near, far] = duplexPair()
        broker.handle(far)
        return near
      }, { reconnectPeriod: 0, connectTimeout: WAIT_MS, protocolVersion: 4, username: BOOTSTRAP_KEY, password: " " })
    )

  it("closes that MQTT connection unacknowledged, logs the cause, and leaves the others served", async () => {
    const bystander = await connectInMemory()
    for (const topic of ["devices/dev_x/events/boom", "devices/dev_x/locations", "devices/dev_x/commands/reboot"]) {
      const victim = await connectInMemory()
      const closed = closedBy(victim)
      let acknowledged = false
      void victim.publishAsync(topic, JSON.stringify(topic.endsWith("locations") ? { latitude: 1, longitude: 2 } : { data: 1 }), { qos: 1 }).then(
        () => (acknowledged = true),
        () => {}
      )
      await closed
      // No PUBACK: the client sends it again after reconnecting; nothing was stored for it.
      expect(acknowledged).toBe(false)
    }
    const errors = logs.filter((l) => l.level === "Error")
    expect(errors).toHaveLength(3)
    for (const line of errors) expect(line.message).toMatch(/^mqtt publish on devices\/dev_x\/\S+ from client \S+ from memory failed; closing the connection .*RangeError: Maximum call stack size exceeded/s)
    expect(bystander.connected).toBe(true)
    expect(await subscribe(bystander, "devices/dev_unknown/events/+")).toEqual([128])
    await bystander.endAsync()
  })

  it("answers REST with a JSON 500 and logs the cause through the logger", async () => {
    const before = logs.length
    const res = await request("/events", { name: "boom", device: { id: "dev_x" } })
    expect(res.status).toBe(500)
    expect(await res.json()).toEqual({ error: { status: 500, code: "internal", message: "the server failed to answer this request; it has been logged" } })
    const logged = logs.slice(before).filter((l) => l.level === "Error")
    expect(logged).toHaveLength(1)
    expect(logged[0].message).toMatch(/^http POST \/v1\/events failed .*RangeError/s)
  })
})
