import { generate, parse } from "coap-packet"
import { ConfigProvider, Context, Deferred, Effect, Exit, Layer, Logger, Scope } from "effect"
import { createSocket } from "node:dgram"
import { describe, expect, it } from "vitest"
import { CoapLive, CoapServer } from "../../src/adapters/coap/CoapServer.ts"
import { describeStartupFailure } from "../../src/app.ts"
import { Auth } from "../../src/auth/Auth.ts"
import { Ingest } from "../../src/ingest/Ingest.ts"
import { rawPeer } from "../support/coap.ts"

const auth = Layer.succeed(
  Auth,
  Auth.of({
    authenticate: () => Effect.succeed({ kind: "device", id: "dev_1", organisationId: "org_1" }),
    forget: () => Effect.void,
    onCredentialsChanged: () => Effect.void
  })
)

/** An Ingest whose events are stored when the test says so. */
const gatedIngest = (received: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Layer.succeed(
    Ingest,
    Ingest.of({
      event: (e) =>
        Effect.andThen(
          Effect.andThen(Deferred.succeed(received, undefined), Deferred.await(release)),
          Effect.succeed({ id: "evt_1", name: e.payload.name, data: null, timestamp: 1, device: { id: "dev_1" } })
        ),
      location: () => Effect.die("not used"),
      runCommand: () => Effect.die("not used"),
      submitEvent: () => false,
      forgetDevices: () => undefined
    })
  )

const start = async (env: Record<string, string>, services: Layer.Layer<Auth | Ingest>, logs: Array<string> = []) => {
  const scope = await Effect.runPromise(Scope.make())
  const exit = await Effect.runPromiseExit(
    Layer.buildWithScope(
      CoapLive.pipe(
        Layer.provide(Layer.mergeAll(services, Logger.layer([Logger.make(({ message }) => logs.push(String(message)))]))),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ COAP_PORT: "0", HOST: "127.0.0.1", ...env })))
      ),
      scope
    )
  )
  return { exit, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

const post = (messageId: number) =>
  generate({
    messageId,
    token: Buffer.of(messageId & 0xff),
    confirmable: true,
    code: "POST",
    options: [{ name: "Uri-Path", value: Buffer.from("events") }],
    payload: Buffer.from(JSON.stringify({ accessToken: "d_sk_x", name: "n" }))
  })

const services = async () => {
  const received = await Effect.runPromise(Deferred.make<void>())
  const release = await Effect.runPromise(Deferred.make<void>())
  return { received, release, layer: Layer.merge(auth, gatedIngest(received, release)) }
}

describe("the CoAP listener", () => {
  it("binds a free port for COAP_PORT=0 and logs it", async () => {
    const logs: Array<string> = []
    const { exit, close } = await start({}, (await services()).layer, logs)
    try {
      if (!Exit.isSuccess(exit)) throw new Error(String(exit.cause))
      const port = Context.get(exit.value, CoapServer).port
      expect(port).toBeGreaterThan(0)
      expect(logs).toContain(`coap listening on 127.0.0.1:${port}`)
    } finally {
      await close()
    }
  })

  it("fails start-up with ListenFailed naming COAP_PORT when the port is taken, and frees it on close", async () => {
    const first = await start({}, (await services()).layer)
    if (!Exit.isSuccess(first.exit)) throw new Error(String(first.exit.cause))
    const port = Context.get(first.exit.value, CoapServer).port
    const second = await start({ COAP_PORT: String(port) }, (await services()).layer)
    expect(Exit.isFailure(second.exit)).toBe(true)
    if (Exit.isFailure(second.exit)) {
      expect(describeStartupFailure(second.exit.cause)).toBe(`COAP_PORT: 127.0.0.1:${port} is already in use`)
    }
    await second.close()
    await first.close()
    // Closed with its scope: the port can be bound again.
    const socket = createSocket("udp4")
    await new Promise<void>((resolve, reject) => {
      socket.once("error", reject)
      socket.bind(port, "127.0.0.1", () => resolve())
    })
    await new Promise<void>((resolve) => socket.close(() => resolve()))
  })

  it("answers a request being stored before it closes", async () => {
    const { received, release, layer } = await services()
    const { exit, close } = await start({}, layer)
    if (!Exit.isSuccess(exit)) throw new Error(String(exit.cause))
    const peer = await rawPeer(Context.get(exit.value, CoapServer).port)
    try {
      await peer.send(post(1))
      await Effect.runPromise(Deferred.await(received))
      const closing = close()
      await Effect.runPromise(Deferred.succeed(release, undefined))
      const [reply] = await peer.next()
      expect(parse(reply)).toMatchObject({ code: "2.01", ack: true, messageId: 1 })
      await closing
    } finally {
      await peer.close()
    }
  })

  it("answers 5.03 with Max-Age to a request still not stored when the drain time is over", async () => {
    const { received, layer } = await services()
    const { exit, close } = await start({}, layer)
    if (!Exit.isSuccess(exit)) throw new Error(String(exit.cause))
    const peer = await rawPeer(Context.get(exit.value, CoapServer).port)
    try {
      await peer.send(post(2))
      await Effect.runPromise(Deferred.await(received))
      await close()
      // Not stored within the piggyback window: an empty ACK, then the reply on its own (RFC 7252 §5.2.2).
      const [ack, reply] = await peer.next(2)
      expect(parse(ack)).toMatchObject({ code: "0.00", ack: true, messageId: 2 })
      const packet = parse(reply)
      expect(packet).toMatchObject({ code: "5.03", confirmable: true })
      expect(packet.token).toEqual(Buffer.of(2))
      expect(packet.options.find((o) => o.name === "Max-Age")?.value).toEqual(Buffer.of(5))
    } finally {
      await peer.close()
    }
  })
})
