import { Effect, Exit, Logger, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { BusService, Delivery } from "../../src/bus/Bus.ts"
import { makeNatsBus } from "../../src/bus/natsBus.ts"
import { type PrivateNats, startPrivateNats } from "../support/nats.ts"

const until = async (what: string, check: () => boolean) => {
  for (let i = 0; i < 400; i++) {
    if (check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

const delivery = (payload: string): Delivery => ({ organisationId: "org_o", deviceId: "dev_o", topic: "devices/dev_o/events/t", payload })

describe("the NATS bus when its server dies and comes back", () => {
  let nats: PrivateNats
  let scope: Scope.Closeable
  let bus: BusService
  const logs: Array<{ level: string; message: string }> = []
  const received: Array<string> = []
  const controls: Array<string> = []
  const lines = (prefix: string) => logs.filter((l) => l.message.startsWith(prefix))

  beforeAll(async () => {
    nats = await startPrivateNats()
    scope = await Effect.runPromise(Scope.make())
    const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
      const parts = Array.isArray(message) ? message : [message]
      logs.push({ level: logLevel, message: parts.map(String).join(" ") })
    })
    bus = await Effect.runPromise(
      makeNatsBus(nats.url, { reconnectTimeWaitMs: 50 }).pipe(Scope.provide(scope), Effect.provide(Logger.layer([capture])))
    )
    await Effect.runPromise(bus.onDelivery((d) => received.push(d.payload)).pipe(Scope.provide(scope)))
    await Effect.runPromise(bus.onControl((m) => controls.push(m.type)).pipe(Scope.provide(scope)))
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await nats.kill()
  })

  /** Delivers until one arrives: the subscription is registered on the server asynchronously. */
  const deliverUntilReceived = async (payload: string) => {
    await until(`delivery ${payload}`, () => {
      bus.send(delivery(payload))
      return received.includes(payload)
    })
  }

  it("logs the loss and the reconnection once per outage, delivers what is sent meanwhile to this process only, and delivers again after", async () => {
    await deliverUntilReceived("before")
    expect(bus.connected()).toBe(true)

    for (const round of [1, 2]) {
      logs.length = 0
      await nats.kill()
      await until("the loss", () => !bus.connected())
      // Sending during the outage neither throws nor blocks, however often, and this process's
      // own subscribers still receive it (as NATS would have echoed it), each once.
      for (let i = 0; i < 1_000; i++) bus.send(delivery(`during-${round}`))
      const controlsBefore = controls.length
      await Effect.runPromise(bus.control({ type: "credentials.changed" }))
      expect(controls.length).toBe(controlsBefore + 1)
      await nats.restart()
      await until("the reconnection", () => bus.connected())
      await deliverUntilReceived(`after-${round}`)
      // Not queued for the server as well: nothing arrives twice after the reconnection.
      expect(received.filter((p) => p === `during-${round}`)).toHaveLength(1_000)
      expect(lines("bus: lost NATS (").map((l) => l.level)).toEqual(["Warn"])
      expect(lines("bus: reconnected to NATS after ").map((l) => l.level)).toEqual(["Info"])
    }
  })
})
