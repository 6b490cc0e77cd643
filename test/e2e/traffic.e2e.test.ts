import coap from "coap"
import http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connectStream, createRestClient, type RestClient, type StreamClient } from "../../src/client/index.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { type ServerProcess, startServerProcess } from "../support/process.ts"

/** Resolves with the first value `subscribe` hands to its callback that passes `predicate`. */
const waitFor = <T>(register: (handler: (value: T) => void) => unknown, predicate: (value: T) => boolean, what: string) =>
  new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${what} within 5 s`)), 5_000)
    register((value) => {
      if (predicate(value)) {
        clearTimeout(timer)
        resolve(value)
      }
    })
  })

const coapPost = (port: number, path: string, payload: unknown) =>
  new Promise<{ code: string; body: string }>((resolve, reject) => {
    const req = coap.request({ hostname: "127.0.0.1", port, method: "POST", pathname: path, confirmable: true })
    req.on("response", (res: { code: string; payload: Buffer }) => resolve({ code: res.code, body: res.payload.toString() }))
    req.on("error", reject)
    req.end(JSON.stringify(payload))
  })

describe("end to end over real sockets", () => {
  let server: ServerProcess
  let rest: RestClient
  let spaceId: string
  let deviceId: string
  let deviceKey: string
  const streams: Array<StreamClient> = []
  const stream = async (url: string, key: string) => {
    const s = connectStream({ url, key })
    streams.push(s)
    await s.ready()
    return s
  }

  beforeAll(async () => {
    server = await startServerProcess({ DATABASE_URL: "memory://", BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY })
    rest = createRestClient({ baseUrl: `http://127.0.0.1:${server.port}/v1`, key: BOOTSTRAP_KEY })
    const space = await rest.spaces.create({ name: "E2E" })
    spaceId = space.id
    const device = await rest.devices.create({ name: "Probe", space: { id: space.id } })
    deviceId = device.id
    deviceKey = device.secretKey
  })
  afterAll(async () => {
    await Promise.all(streams.map((s) => s.close()))
    await server?.stop()
  })

  it("delivers events published over REST, MQTT and CoAP to MQTT subscribers over TCP and WebSocket, and stores each once", async () => {
    const appTcp = await stream(`mqtt://127.0.0.1:${server.mqttPort}`, BOOTSTRAP_KEY)
    const appWs = await stream(`ws://127.0.0.1:${server.mqttWsPort}`, BOOTSTRAP_KEY)
    const device = await stream(`mqtt://127.0.0.1:${server.mqttPort}`, deviceKey)
    const tcpEvents: Array<(e: { name: string; data: unknown }) => void> = []
    const wsEvents: Array<(e: { name: string; data: unknown }) => void> = []
    await appTcp.subscribeEvents(deviceId, (e) => tcpEvents.forEach((h) => h(e)))
    await appWs.subscribeEvents(deviceId, (e) => wsEvents.forEach((h) => h(e)))

    const sources: Array<[string, () => Promise<unknown>]> = [
      ["rest", () => createRestClient({ baseUrl: `http://127.0.0.1:${server.port}/v1`, key: deviceKey }).events.publish({ name: "via", data: "rest" })],
      ["mqtt", () => device.publishEvent("via", "mqtt")],
      ["coap", async () => {
        const res = await coapPost(server.coapPort, "/events", { accessToken: deviceKey, name: "via", data: "coap" })
        expect(res.code).toBe("2.01")
      }]
    ]
    for (const [source, publish] of sources) {
      const overTcp = waitFor(tcpEvents.push.bind(tcpEvents), (e) => e.data === source, `${source} event over TCP`)
      const overWs = waitFor(wsEvents.push.bind(wsEvents), (e) => e.data === source, `${source} event over WebSocket`)
      await publish()
      const [a, b] = await Promise.all([overTcp, overWs])
      expect(a).toEqual(b)
      expect(a).toMatchObject({ name: "via", data: source, device: { id: deviceId } })
    }
    const stored = await rest.events.list(deviceId, { name: "via" })
    expect(stored.events.map((e) => e.data).sort()).toEqual(["coap", "mqtt", "rest"])
  })

  it("delivers locations published over MQTT and CoAP", async () => {
    const app = await stream(`mqtt://127.0.0.1:${server.mqttPort}`, BOOTSTRAP_KEY)
    const device = await stream(`mqtt://127.0.0.1:${server.mqttPort}`, deviceKey)
    const handlers: Array<(l: { latitude: string }) => void> = []
    await app.subscribeLocations(deviceId, (l) => handlers.forEach((h) => h(l)))
    const viaMqtt = waitFor(handlers.push.bind(handlers), (l) => l.latitude === "10.5", "MQTT location")
    await device.publishLocation({ latitude: 10.5, longitude: 20.25 })
    expect(await viaMqtt).toMatchObject({ latitude: "10.5", longitude: "20.25", device: { id: deviceId } })
    const viaCoap = waitFor(handlers.push.bind(handlers), (l) => l.latitude === "-33.9", "CoAP location")
    expect((await coapPost(server.coapPort, "/locations", { accessToken: deviceKey, latitude: -33.9, longitude: 18.4 })).code).toBe("2.01")
    expect(await viaCoap).toMatchObject({ longitude: "18.4" })
  })

  it("runs a command from REST and from MQTT on the device subscribed to it", async () => {
    await rest.commands.create({ name: "Blink", device: { id: deviceId } })
    const device = await stream(`mqtt://127.0.0.1:${server.mqttPort}`, deviceKey)
    const runs: Array<(r: { data: unknown; slug: string }) => void> = []
    await device.onCommand(deviceId, "blink", (r) => runs.forEach((h) => h(r)))
    const fromRest = waitFor(runs.push.bind(runs), (r) => r.data === "rest", "run from REST")
    await rest.commands.run({ slug: "blink", device: { id: deviceId }, data: "rest" })
    expect(await fromRest).toMatchObject({ slug: "blink", device: { id: deviceId } })
    const app = await stream(`mqtt://127.0.0.1:${server.mqttPort}`, BOOTSTRAP_KEY)
    const fromMqtt = waitFor(runs.push.bind(runs), (r) => r.data === "mqtt", "run from MQTT")
    await app.runCommand(deviceId, "blink", "mqtt")
    expect(await fromMqtt).toMatchObject({ slug: "blink" })
  })

  it("tells the stream client about connect, disconnect, offline and reconnect", async () => {
    // A client of its own server, so stopping it does not disturb the tests above.
    const own = await startServerProcess({ DATABASE_URL: "memory://", BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY })
    const seen: Array<string> = []
    const client = connectStream({ url: `mqtt://127.0.0.1:${own.mqttPort}`, key: BOOTSTRAP_KEY, mqtt: { reconnectPeriod: 200 } })
    for (const name of ["connect", "disconnect", "offline", "reconnect"] as const) client.on(name, () => seen.push(name))
    const errors: Array<Error> = []
    client.on("error", (e) => errors.push(e))
    await client.ready()
    const reconnecting = new Promise<void>((resolve) => client.on("reconnect", () => resolve()))
    await own.stop()
    await reconnecting
    await client.close()
    expect(seen[0]).toBe("connect")
    expect(seen).toContain("disconnect")
    expect(seen).toContain("offline")
    expect(seen).toContain("reconnect")
  }, 90_000)

  it("keeps a kept-alive connection usable after refusing a large body unread, and reads GET /commands' device from a body", async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const send = (method: string, path: string, key: string, body?: Buffer) =>
      new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
        const req = http.request({
          host: "127.0.0.1",
          port: server.port,
          method,
          path: `/v1${path}`,
          agent,
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...(body ? { "content-length": body.length } : {}) }
        }, (res) => {
          let text = ""
          res.on("data", (chunk) => (text += chunk))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body: text }))
        })
        req.on("error", reject)
        req.end(body)
      })
    try {
      const big = Buffer.from(JSON.stringify({ name: "big", data: "x".repeat(900 * 1024) }))
      for (const [key, body, status] of [["a_sk_not_a_key", big, 401], [BOOTSTRAP_KEY, Buffer.alloc(2 * 1024 * 1024, 0x20), 413]] as const) {
        const refused = await send("POST", key === BOOTSTRAP_KEY ? "/locations" : "/events", key, body)
        expect(refused.status).toBe(status)
        expect(refused.connection).toBe("close")
        expect((await send("GET", "/whoami", BOOTSTRAP_KEY)).status).toBe(200)
      }
      const other = await rest.devices.create({ name: "Other", space: { id: spaceId } })
      await rest.commands.create({ name: "Body Listed", device: { id: deviceId } })
      await rest.commands.create({ name: "Body Listed Two", device: { id: deviceId } })
      await rest.commands.create({ name: "Elsewhere", device: { id: other.id } })
      type Listed = { commands: Array<{ name: string; device: { id: string } }>; count: number }
      const list = async (body: unknown) => {
        const reply = await send("GET", "/commands", BOOTSTRAP_KEY, Buffer.from(JSON.stringify(body)))
        expect(reply.status).toBe(200)
        return JSON.parse(reply.body) as Listed
      }
      const mine = await list({ device: { id: deviceId } })
      expect(mine.commands.map((c) => c.name)).toEqual(expect.arrayContaining(["Body Listed", "Body Listed Two"]))
      expect(mine.commands.every((c) => c.device.id === deviceId)).toBe(true)
      expect((await list({ device: { id: other.id } })).commands.map((c) => c.name)).toEqual(["Elsewhere"])
      // The list parameters come from the body too.
      const paged = await list({ device: { id: deviceId }, limit: 1, order: "name", sort: "desc" })
      expect(paged.commands.map((c) => c.name)).toEqual(["Body Listed Two"])
      expect(paged.count).toBe(mine.count)
      const badLimit = await send("GET", "/commands", BOOTSTRAP_KEY, Buffer.from(JSON.stringify({ limit: "lots" })))
      expect(badLimit.status).toBe(400)
      expect(JSON.parse(badLimit.body).error.field).toBe("limit")
      const unknown = await send("GET", "/commands", BOOTSTRAP_KEY, Buffer.from(JSON.stringify({ device: { id: "dev_nope" } })))
      expect(unknown.status).toBe(404)
    } finally {
      agent.destroy()
    }
  })

  it("emits error when the credential is refused", async () => {
    const client = connectStream({ url: `mqtt://127.0.0.1:${server.mqttPort}`, key: "d_sk_not_a_key", mqtt: { reconnectPeriod: 0 } })
    const error = await client.ready().then(() => undefined, (e: unknown) => e)
    await client.close()
    expect(error).toBeInstanceOf(Error)
  })
})
