import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import mqtt from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { eventually } from "../support/eventually.ts"
import { type ServerProcess, startServerProcess } from "../support/process.ts"

interface JsonLine {
  readonly time: string
  readonly level: string
  readonly message: string
  readonly [field: string]: unknown
}

const jsonLines = (output: string): Array<JsonLine> =>
  output.split("\n").filter((line) => line.trim() !== "").map((line) => JSON.parse(line) as JsonLine)

describe("LOG_FORMAT=json", () => {
  let dir: string
  let server: ServerProcess
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "voltaic-logs-"))
    // No BOOTSTRAP_APP_KEY: the generated secrets must come as a line of JSON too.
    server = await startServerProcess({ DATA_DIR: dir, LOG_FORMAT: "json", LOG_LEVEL: "debug" })
  })
  afterAll(async () => {
    await server?.stop()
    await rm(dir, { recursive: true, force: true })
  })

  it("writes every line as one JSON object with time, level and message, the first-start secrets included", () => {
    const lines = jsonLines(server.output())
    expect(lines.length).toBeGreaterThan(3)
    for (const line of lines) {
      expect(Number.isNaN(Date.parse(line.time))).toBe(false)
      expect(["trace", "debug", "info", "warn", "error", "fatal"]).toContain(line.level)
      expect(typeof line.message).toBe("string")
    }
    expect(lines.some((l) => /^http listening on 127\.0\.0\.1:\d+ /.test(l.message))).toBe(true)
    const secrets = lines.find((l) => l.message.startsWith("Voltaic created its first organisation"))
    expect(secrets).toMatchObject({ adminEmail: "admin@voltaic.local" })
    expect(String(secrets?.applicationKey)).toMatch(/^a_sk_/)
    expect(String(secrets?.adminPassword).length).toBeGreaterThanOrEqual(12)
  })

  it("gives a refused request's line at info its request id, route, principal and device, and answers the id", async () => {
    const key = String(jsonLines(server.output()).find((l) => l.applicationKey !== undefined)?.applicationKey)
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/devices/dev_nope`, {
      headers: { authorization: `Bearer ${key}`, "x-request-id": "trace-42.a" }
    })
    expect(res.status).toBe(404)
    expect(res.headers.get("x-request-id")).toBe("trace-42.a")
    const line = (await eventually(() => jsonLines(server.output()).find((l) => l.requestId === "trace-42.a"), 5_000, "the refusal's line")).value
    expect(line).toMatchObject({ level: "info", route: "/v1/devices/:id", deviceId: "dev_nope" })
    expect(String(line.principal)).toMatch(/^app:key_/)
    expect(line.message).toContain("refused 404")

    // Not a plausible id (a space, a newline): one is made instead, and answered.
    const made = await fetch(`http://127.0.0.1:${server.port}/v1/devices`, { headers: { authorization: "Bearer a_sk_wrong", "x-request-id": "a b" } })
    expect(made.status).toBe(401)
    const id = made.headers.get("x-request-id") ?? ""
    // This process's 8-character prefix, then a counter in base 36.
    expect(id).toMatch(/^req_[\w-]{8}[0-9a-z]+$/)
    const refused = (await eventually(() => jsonLines(server.output()).find((l) => l.requestId === id), 5_000, "the 401's line")).value
    expect(refused).toMatchObject({ level: "info", route: "/v1/devices" })
    expect(refused.principal).toBeUndefined()
    expect(BOOTSTRAP_KEY).not.toBe(key)
  })

  it("answers the request id once on every kind of answer: a route's JSON, a page, a stream, a 405", async () => {
    const key = String(jsonLines(server.output()).find((l) => l.applicationKey !== undefined)?.applicationKey)
    const answers = [
      ["/v1/devices", { authorization: `Bearer ${key}` }, 200],
      ["/health", {}, 200],
      ["/docs", {}, 200],
      ["/v1/openapi.json", {}, 200]
    ] as const
    for (const [path, headers, status] of answers) {
      const id = `trace-${path.replace(/\W/g, "")}`
      const res = await fetch(`http://127.0.0.1:${server.port}${path}`, { headers: { ...headers, "x-request-id": id } })
      expect(res.status, path).toBe(status)
      // A header written twice would come back joined ("id, id").
      expect(res.headers.get("x-request-id"), path).toBe(id)
      await res.arrayBuffer()
    }
    const refused = await fetch(`http://127.0.0.1:${server.port}/health`, { method: "DELETE", headers: { "x-request-id": "trace-405" } })
    expect(refused.status).toBe(405)
    expect(refused.headers.get("x-request-id")).toBe("trace-405")
    const controller = new AbortController()
    const stream = await fetch(`http://127.0.0.1:${server.port}/v1/stream?access_token=${key}`, {
      headers: { "x-request-id": "trace-stream" },
      signal: controller.signal
    })
    expect(stream.headers.get("content-type")).toContain("text/event-stream")
    expect(stream.headers.get("x-request-id")).toBe("trace-stream")
    controller.abort()
  })

  it("gives an MQTT refusal's line at info the client id, the principal and the device", async () => {
    const key = String(jsonLines(server.output()).find((l) => l.applicationKey !== undefined)?.applicationKey)
    const post = async (path: string, body: unknown) =>
      (await fetch(`http://127.0.0.1:${server.port}/v1${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body)
      })).json() as Promise<{ id: string; secretKey: string }>
    const space = await post("/spaces", { name: "Logs" })
    const device = await post("/devices", { name: "Chatty", space: { id: space.id } })
    const client = await mqtt.connectAsync(`mqtt://127.0.0.1:${server.mqttPort}`, {
      clientId: "json-log-client",
      username: device.secretKey,
      password: " ",
      reconnectPeriod: 0
    })
    try {
      // Not JSON: refused (PUBACKed and dropped), and logged.
      await client.publishAsync("events", "{not json", { qos: 1 })
    } finally {
      await client.endAsync(true)
    }
    const line = (await eventually(() => jsonLines(server.output()).find((l) => l.clientId === "json-log-client" && /refused/.test(l.message)), 5_000, "the publish refusal's line")).value
    expect(line).toMatchObject({ level: "info", principal: `device:${device.id}`, deviceId: device.id })
    expect(line.message).toMatch(/^mqtt publish on events from client json-log-client from 127\.0\.0\.1:\d+ refused/)
  })
})
