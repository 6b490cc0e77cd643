import { Aedes } from "aedes"
import mqtt from "mqtt"
import { type AddressInfo, createServer, type Server, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connectStream, type StreamClient } from "../../src/client/index.ts"

/**
 * The stream client against a bare aedes broker on a real socket (no auth, no storage): what
 * the client does with what any broker may deliver, such as a payload that is not JSON.
 */
describe("the stream client", () => {
  let broker: Aedes
  let server: Server
  let url: string
  const sockets = new Set<Socket>()
  const streams: Array<StreamClient> = []
  beforeAll(async () => {
    broker = await Aedes.createBroker()
    broker.on("clientError", () => {})
    broker.on("connectionError", () => {})
    server = createServer((socket) => {
      sockets.add(socket)
      socket.once("close", () => sockets.delete(socket))
      broker.handle(socket)
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    url = `mqtt://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    await Promise.all(streams.map((s) => s.close()))
    for (const socket of sockets) socket.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
    await new Promise<void>((resolve) => broker.close(() => resolve()))
  })

  const open = async () => {
    const stream = connectStream({ url, key: "any", mqtt: { reconnectPeriod: 0 } })
    streams.push(stream)
    await stream.ready()
    return stream
  }

  const publishRaw = async (topic: string, payload: string) => {
    const raw = await mqtt.connectAsync(url)
    await raw.publishAsync(topic, payload, { qos: 1 })
    await raw.endAsync()
  }

  it("emits `error` for a message that is not JSON and goes on delivering the next", async () => {
    const stream = await open()
    const events: Array<unknown> = []
    let delivered: () => void = () => {}
    const second = new Promise<void>((resolve) => (delivered = resolve))
    await stream.subscribeEvents("dev_a", (event) => {
      events.push(event.data)
      delivered()
    })
    const error = new Promise<Error>((resolve) => stream.on("error", resolve))
    await publishRaw("devices/dev_a/events/t", "{not json")
    expect((await error).message).toMatch(/^a message on devices\/dev_a\/events\/t is not JSON/)
    await publishRaw("devices/dev_a/events/t", JSON.stringify({ data: 2 }))
    await second
    expect(events).toEqual([2])
  })

  it("removes a listener from the notification it is taken off and no other", async () => {
    const stream = await open()
    const heard: Array<string> = []
    const listener = () => heard.push("called")
    stream.on("error", listener).on("disconnect", listener)
    stream.off("error", listener)
    const errored = new Promise<void>((resolve) => stream.on("error", () => resolve()))
    await stream.subscribeEvents("dev_b", () => {})
    await publishRaw("devices/dev_b/events/t", "<xml/>")
    await errored
    expect(heard).toEqual([])
    const disconnected = new Promise<void>((resolve) => stream.on("disconnect", () => resolve()))
    for (const socket of sockets) socket.destroy()
    await disconnected
    expect(heard).toEqual(["called"])
  })
})
