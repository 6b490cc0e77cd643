import { generate, parse } from "coap-packet"
import { ConfigProvider, Context, Deferred, Effect, Exit, Layer, Logger, Scope } from "effect"
import { createSocket } from "node:dgram"
import { describe, expect, it, vi } from "vitest"
import { CoapListener } from "../../src/adapters/coap/CoapListener.ts"
import { CoapLive, CoapServer } from "../../src/adapters/coap/CoapServer.ts"
import { describeStartupFailure } from "../../src/startupFailure.ts"
import { Auth } from "../../src/auth/Auth.ts"
import { Unavailable } from "../../src/domain/errors.ts"
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

/** An Ingest whose events are stored when the test says so; `stored.count` counts the events it was given. */
const gatedIngest = (received: Deferred.Deferred<void>, release: Deferred.Deferred<void>, stored = { count: 0 }) =>
  Layer.succeed(
    Ingest,
    Ingest.of({
      event: (e) =>
        Effect.gen(function*() {
          stored.count += 1
          yield* Deferred.succeed(received, undefined)
          yield* Deferred.await(release)
          return { id: "evt_1", name: e.payload.name, data: null, timestamp: 1, device: { id: "dev_1" } }
        }),
      location: () => Effect.die("not used"),
      runCommand: () => Effect.die("not used"),
      submitEvent: () => false,
      commandsChanged: () => Effect.void,
      forgetDevices: () => undefined
    })
  )

const start = async (env: Record<string, string>, services: Layer.Layer<Auth | Ingest>, logs: Array<string> = []) => {
  const scope = await Effect.runPromise(Scope.make())
  const exit = await Effect.runPromiseExit(
    Layer.buildWithScope(
      CoapLive.pipe(
        Layer.provide(CoapListener.layer),
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
  const stored = { count: 0 }
  return { received, release, stored, layer: Layer.merge(auth, gatedIngest(received, release, stored)) }
}

/** An Ingest that is behind: every event is refused with 5.03 (back-pressure). */
const behindIngest = Layer.succeed(
  Ingest,
  Ingest.of({
    event: () => Effect.fail(new Unavailable({ retryAfterSeconds: 2, message: "the store is behind; retry shortly" })),
    location: () => Effect.die("not used"),
    runCommand: () => Effect.die("not used"),
    submitEvent: () => false,
    commandsChanged: () => Effect.void,
    forgetDevices: () => undefined
  })
)

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

describe("copies of a Confirmable request being stored", () => {
  it("ignores a copy before the empty ACK, answers later ones with it, and sends the response once", async () => {
    const { received, release, stored, layer } = await services()
    const { exit, close } = await start({}, layer)
    if (!Exit.isSuccess(exit)) throw new Error(String(exit.cause))
    const peer = await rawPeer(Context.get(exit.value, CoapServer).port)
    try {
      await peer.send(post(3))
      await Effect.runPromise(Deferred.await(received))
      // A copy while the first is being stored, within the piggyback window: its answer is yet to come.
      await peer.send(post(3))
      // The store is slow: an empty ACK (RFC 7252 §5.2.2), one only.
      const [ack] = await peer.next()
      expect(parse(ack)).toMatchObject({ code: "0.00", ack: true, messageId: 3 })
      expect(await peer.settle(200)).toEqual([])
      // A copy after it gets the same empty ACK.
      await peer.send(post(3))
      expect(await peer.next()).toEqual([ack])
      await Effect.runPromise(Deferred.succeed(release, undefined))
      const [response] = await peer.next()
      const packet = parse(response)
      expect(packet).toMatchObject({ code: "2.01", confirmable: true })
      expect(packet.token).toEqual(Buffer.of(3))
      // Acknowledged (RFC 7252 §4.2): nothing else comes, no second response.
      await peer.send(generate({ code: "0.00", ack: true, messageId: packet.messageId, token: Buffer.alloc(0) }))
      expect(await peer.settle(500)).toEqual([])
      expect(stored.count).toBe(1)
    } finally {
      await peer.close()
      await close()
    }
  })
})

describe("the CoAP listener's log", () => {
  it("logs a 5.03 back-pressure refusal once, naming the peer and the reason", async () => {
    const logs: Array<string> = []
    const { exit, close } = await start({}, Layer.merge(auth, behindIngest), logs)
    if (!Exit.isSuccess(exit)) throw new Error(String(exit.cause))
    const peer = await rawPeer(Context.get(exit.value, CoapServer).port)
    try {
      await peer.send(post(4))
      const reply = parse((await peer.next())[0])
      expect(reply).toMatchObject({ code: "5.03", ack: true, messageId: 4 })
      expect(reply.options.find((o) => o.name === "Max-Age")?.value).toEqual(Buffer.of(2))
      const line = `coap POST /events from 127.0.0.1:${peer.port} refused 5.03: the store is behind; retry shortly`
      await vi.waitFor(() => expect(logs).toContain(line))
      await peer.send(post(4))
      await peer.next()
      await peer.settle(100)
      expect(logs.filter((l) => l.includes("refused"))).toEqual([line])
    } finally {
      await peer.close()
      await close()
    }
  })
})
