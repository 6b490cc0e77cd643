import { ConfigProvider, Context, Effect, Exit, Layer, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Bus, type BusService, type Delivery } from "../../src/bus/Bus.ts"

export const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

const open = async (env: Record<string, string>): Promise<{ bus: BusService; scope: Scope.Closeable }> => {
  const scope = await Effect.runPromise(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(Bus.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))), scope)
  )
  return { bus: Context.get(context, Bus), scope }
}

const nextDelivery = (bus: BusService, scope: Scope.Closeable, predicate: (d: Delivery) => boolean) =>
  new Promise<Delivery>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no delivery within 5 s")), 5_000)
    Effect.runSync(Scope.provide(scope)(bus.onDelivery((d) => {
      if (predicate(d)) {
        clearTimeout(timer)
        resolve(d)
      }
    })))
  })

const delivery = (payload: string): Delivery => ({
  organisationId: "org_x",
  deviceId: "dev_x",
  topic: "devices/dev_x/events/t",
  payload
})

describe("the in-process bus", () => {
  it("hands a delivery to every handler of the process", async () => {
    const { bus, scope } = await open({})
    expect(bus.kind).toBe("memory")
    const a = nextDelivery(bus, scope, () => true)
    const b = nextDelivery(bus, scope, () => true)
    await Effect.runPromise(bus.deliver(delivery("1")))
    expect((await a).payload).toBe("1")
    expect((await b).payload).toBe("1")
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })
})

describe("the NATS bus", () => {
  let one: { bus: BusService; scope: Scope.Closeable }
  let two: { bus: BusService; scope: Scope.Closeable }
  beforeAll(async () => {
    one = await open({ NATS_URL })
    two = await open({ NATS_URL })
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(one.scope, Exit.void))
    await Effect.runPromise(Scope.close(two.scope, Exit.void))
  })

  it("carries a delivery from one connection to another", async () => {
    expect(one.bus.kind).toBe("nats")
    const marker = `m-${Math.random()}`
    const received = nextDelivery(two.bus, two.scope, (d) => d.payload === marker)
    // The subscription must be registered on the server before the publish.
    await new Promise((r) => setTimeout(r, 100))
    await Effect.runPromise(one.bus.deliver(delivery(marker)))
    expect(await received).toEqual(delivery(marker))
  })

  it("carries control messages to every connection", async () => {
    // Other suites share the NATS server and its control subject: this test's own message is the
    // one it waits for (its organisation a marker), whatever else passes meanwhile.
    const marker = `org_m${Math.random().toString(36).slice(2)}`
    const seen = new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no control message within 5 s")), 5_000)
      Effect.runSync(Scope.provide(two.scope)(two.bus.onControl((m) => {
        if (!("organisationId" in m) || m.organisationId !== marker) return
        clearTimeout(timer)
        resolve(m.type)
      })))
    })
    await new Promise((r) => setTimeout(r, 100))
    await Effect.runPromise(one.bus.control({ type: "commands.changed", organisationId: marker }))
    expect(await seen).toBe("commands.changed")
  })

  it("fails start-up naming NATS_URL when the server is unreachable", async () => {
    const error = await Effect.runPromise(Effect.flip(
      Effect.scoped(Layer.build(Bus.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ NATS_URL: "nats://127.0.0.1:1" }))))))
    ))
    expect(error).toMatchObject({ _tag: "BusUnreachable", setting: "NATS_URL" })
  })
})
