import { Aedes } from "aedes"
import mqtt from "mqtt"
import { createServer as createHttpServer, type Server as HttpServer } from "node:http"
import { type AddressInfo, createServer, type Server, type Socket } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { type LeanAnswer, LeanHttpClient } from "../../bench/lean-http.ts"
import { LeanMqttClient } from "../../bench/lean-mqtt.ts"

/** bench:ingest's command case times runs with these clients: an answer or a message miscounted is a latency made up. */

const listen = (server: Server | HttpServer) =>
  new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)))

const post = (client: LeanHttpClient, path: string, body: string) =>
  new Promise<LeanAnswer | Error>((resolve) => client.post(path, "x-test: 1\r\n", body, resolve))

describe("bench/lean-http.ts", () => {
  const closing: Array<() => void> = []
  afterEach(() => {
    for (const close of closing.splice(0)) close()
  })

  it("answers each request with its own status, by length or chunked, on at most the connections allowed", async () => {
    const sockets = new Set<Socket>()
    const seen: Array<{ path: string; body: string; header: string | undefined }> = []
    const server = createHttpServer((req, res) => {
      let body = ""
      req.on("data", (c: Buffer) => (body += c.toString()))
      req.on("end", () => {
        seen.push({ path: req.url ?? "", body, header: req.headers["x-test"] as string | undefined })
        if (req.url === "/chunked") {
          res.writeHead(201, { "content-type": "application/json" })
          res.write("[1,")
          setTimeout(() => res.end("2]"), 20)
        } else if (req.url === "/missing") {
          res.writeHead(404, { "content-type": "application/json", "content-length": "2" })
          res.end("{}")
        } else {
          const text = JSON.stringify({ echo: body })
          res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) })
          // Headers and body in separate writes: the answer comes in pieces.
          res.flushHeaders()
          setTimeout(() => res.end(text), 5)
        }
      })
    })
    server.on("connection", (s) => sockets.add(s))
    const port = await listen(server)
    closing.push(() => server.close())
    const client = new LeanHttpClient(`http://127.0.0.1:${port}`, 2)
    closing.push(() => client.close())

    const answers = await Promise.all([
      post(client, "/ok", "{\"a\":1}"),
      post(client, "/chunked", "{}"),
      post(client, "/missing", "{}"),
      post(client, "/ok", "{\"b\":2}"),
      post(client, "/chunked", "{}")
    ])
    expect(answers).toEqual([{ status: 200 }, { status: 201 }, { status: 404 }, { status: 200 }, { status: 201 }])
    expect(sockets.size).toBe(2)
    expect(seen.map((s) => s.path).sort()).toEqual(["/chunked", "/chunked", "/missing", "/ok", "/ok"])
    expect(seen.filter((s) => s.path === "/ok").map((s) => s.body).sort()).toEqual(["{\"a\":1}", "{\"b\":2}"])
    expect(seen.every((s) => s.header === "1")).toBe(true)
  })

  it("fails the request in flight when its connection closes, and answers the one queued behind it on a new one", async () => {
    let first = true
    const server = createServer((socket) => {
      socket.on("data", () => {
        if (first) {
          first = false
          socket.destroy()
        } else socket.write("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
      })
    })
    const port = await listen(server)
    closing.push(() => server.close())
    const client = new LeanHttpClient(`http://127.0.0.1:${port}`, 1)
    closing.push(() => client.close())
    // One connection allowed: the second request waits for the first's.
    const [failed, queued] = await Promise.all([post(client, "/x", "{}"), post(client, "/x", "{}")])
    expect(failed).toBeInstanceOf(Error)
    expect(queued).toEqual({ status: 200 })
    expect(await post(client, "/x", "{}")).toEqual({ status: 200 })
  })

  it("does not reuse a connection idle for a second less than the server's announced keep-alive timeout", async () => {
    const sockets: Array<Socket> = []
    const ended: Array<Socket> = []
    const server = createHttpServer((req, res) => {
      req.resume()
      req.on("end", () => res.writeHead(200, { "content-length": "0" }).end())
    })
    // Announced as `keep-alive: timeout=2`: a connection is used while idle under 1 s.
    server.keepAliveTimeout = 2_000
    server.on("connection", (socket: Socket) => {
      sockets.push(socket)
      socket.on("end", () => ended.push(socket))
    })
    const port = await listen(server)
    closing.push(() => server.close())
    const client = new LeanHttpClient(`http://127.0.0.1:${port}`, 4)
    closing.push(() => client.close())
    expect(await post(client, "/a", "{}")).toEqual({ status: 200 })
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(await post(client, "/b", "{}")).toEqual({ status: 200 })
    expect(sockets.length).toBe(1)
    // Idle 1.3 s: within the server's 2 s, but past the client's margin; the client closes it itself.
    await new Promise((resolve) => setTimeout(resolve, 1_300))
    expect(await post(client, "/c", "{}")).toEqual({ status: 200 })
    expect(sockets.length).toBe(2)
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(ended).toEqual([sockets[0]])
  })
})

describe("bench/lean-mqtt.ts subscribing", () => {
  it("receives what is published on its subscription, acknowledges QoS 1, and nothing else", async () => {
    const broker = await Aedes.createBroker()
    const server = createServer((socket) => broker.handle(socket))
    const port = await listen(server)
    const url = `mqtt://127.0.0.1:${port}`
    const device = await LeanMqttClient.connect(url, "lean-device", "")
    const received: Array<[string, string]> = []
    device.onMessage((topic, payload) => received.push([topic, payload.toString()]))
    await device.subscribe("devices/d1/commands/ping/run", 1)
    // Acknowledged: a QoS 1 publish that reached it leaves nothing in the broker's outgoing store for it.
    const acked = new Promise<void>((resolve) => broker.on("ack", () => resolve()))
    const app = await mqtt.connectAsync(url, { clientId: "lean-app", reconnectPeriod: 0 })
    try {
      await app.publishAsync("devices/d2/commands/ping/run", "other", { qos: 1 })
      await app.publishAsync("devices/d1/commands/ping/run", "{\"run\":\"r1\"}", { qos: 1 })
      await acked
      await new Promise((r) => setTimeout(r, 50))
      expect(received).toEqual([["devices/d1/commands/ping/run", "{\"run\":\"r1\"}"]])
    } finally {
      await app.endAsync(true)
      device.end()
      await new Promise<void>((resolve) => broker.close(() => resolve()))
      server.close()
    }
  })
})
