import { execFile } from "node:child_process"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import mqtt from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { coapAgent, coapCall } from "../support/coap.ts"
import { eventually, until } from "../support/eventually.ts"
import { sample } from "../support/metrics.ts"
import { type ServerProcess, startServerProcess } from "../support/process.ts"
import { webhookReceiver } from "../notify/support.ts"

const TOKEN = "metrics-scrape-token-0123456789"

/** `promtool check metrics` on a scrape: its exit code and what it said. */
const promtool = (scrape: string) =>
  new Promise<{ code: number; output: string }>((resolve) => {
    const child = execFile("promtool", ["check", "metrics"], { timeout: 10_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : -1, output: stdout + stderr })
    })
    child.stdin?.end(scrape)
  })

describe("GET /metrics: Prometheus's text format, behind METRICS_TOKEN", () => {
  let dir: string
  let server: ServerProcess
  let webhook: Awaited<ReturnType<typeof webhookReceiver>>
  const base = () => `http://127.0.0.1:${server.port}`
  const call = async (method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => {
    const res = await fetch(`${base()}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    const text = await res.text()
    return { status: res.status, body: text === "" ? undefined : JSON.parse(text) }
  }
  const scrape = async (token = TOKEN) => {
    const res = await fetch(`${base()}/metrics`, { headers: { authorization: `Bearer ${token}` } })
    return { status: res.status, type: res.headers.get("content-type"), text: await res.text() }
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "voltaic-metrics-"))
    webhook = await webhookReceiver([200])
    server = await startServerProcess({ DATA_DIR: dir, BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY, METRICS_TOKEN: TOKEN, ADMIN_EMAIL: "owner@example.com" })
  })
  afterAll(async () => {
    await server?.stop()
    await webhook?.close()
    await rm(dir, { recursive: true, force: true })
  })

  it("answers only the bearer token", async () => {
    expect((await fetch(`${base()}/metrics`)).status).toBe(401)
    const wrong = await scrape("not-the-token")
    expect(wrong.status).toBe(401)
    expect(wrong.text).toContain("METRICS_TOKEN")
    expect(wrong.text).not.toContain("voltaic_")
    const right = await scrape()
    expect(right.status).toBe(200)
    expect(right.type).toBe("text/plain; version=0.0.4; charset=utf-8")
  })

  it("counts what every protocol did, and promtool accepts a scrape taken under load", async () => {
    const space = (await call("POST", "/spaces", { name: "Site" })).body
    const device = (await call("POST", "/devices", { name: "Meter", space: { id: space.id } })).body
    const hook = (await call("POST", "/notificationTemplates", { type: "webhook", title: "t", webhookUrl: webhook.url })).body
    const rule = await call("POST", "/alertRules", {
      name: "Silent",
      type: "offline",
      severity: "high",
      space: { id: space.id },
      notificationTemplate: { id: hook.id },
      config: { afterSeconds: 1 }
    })
    expect(rule.status).toBe(200)

    // REST: two stored, one refused (an unknown device).
    for (let i = 0; i < 2; i++) expect((await call("POST", "/events", { name: "t", data: i, device: { id: device.id } })).status).toBe(200)
    expect((await call("POST", "/events", { name: "t", data: 0, device: { id: "dev_unknown" } })).status).toBe(404)
    // CoAP: one stored.
    const agent = coapAgent()
    try {
      const coap = await coapCall(agent, server.coapPort, { path: "/events", payload: JSON.stringify({ accessToken: device.secretKey, name: "t", data: 1 }) })
      expect(coap.code).toBe("2.01")
    } finally {
      agent.close()
    }
    // MQTT: a connection with one subscription, publishing while the scrape is taken.
    const client = await mqtt.connectAsync(`mqtt://127.0.0.1:${server.mqttPort}`, { username: device.secretKey, password: " ", reconnectPeriod: 0 })
    try {
      await client.subscribeAsync(`devices/${device.id}/commands/+/run`, { qos: 1 })
      let published = 0
      const load = (async () => {
        for (let i = 0; i < 200; i++) {
          await client.publishAsync("events", JSON.stringify({ name: "t", data: i }), { qos: 1 })
          published += 1
        }
      })()
      await until(() => published >= 20, 10_000, "20 MQTT publishes")
      const underLoad = await scrape()
      await load
      const checked = await promtool(underLoad.text)
      expect(checked.output).toBe("")
      expect(checked.code).toBe(0)

      const after = (await scrape()).text
      expect(sample(after, `voltaic_events_ingested_total{protocol="mqtt",outcome="stored"}`)).toBe(200)
      expect(sample(after, `voltaic_events_ingested_total{protocol="http",outcome="stored"}`)).toBe(2)
      expect(sample(after, `voltaic_events_ingested_total{protocol="http",outcome="refused"}`)).toBe(1)
      expect(sample(after, `voltaic_events_ingested_total{protocol="coap",outcome="stored"}`)).toBe(1)
      expect(sample(after, "voltaic_mqtt_connections")).toBe(1)
      expect(sample(after, "voltaic_mqtt_subscriptions")).toBe(1)
      expect(sample(after, `voltaic_coap_datagrams_total{direction="received"}`)).toBeGreaterThanOrEqual(1)
      expect(sample(after, `voltaic_coap_datagrams_total{direction="sent"}`)).toBeGreaterThanOrEqual(1)
      // Every stored event went through the writer: its batches hold them all (and the rest it wrote).
      expect(sample(after, "voltaic_writer_batch_rows_sum")).toBeGreaterThanOrEqual(203)
      expect(sample(after, "voltaic_writer_commit_seconds_count")).toBeGreaterThan(0)
      expect(sample(after, `voltaic_http_request_duration_seconds_count{method="POST",route="/v1/events",status="200"}`)).toBe(2)
      expect(sample(after, `voltaic_http_request_duration_seconds_count{method="POST",route="/v1/events",status="404"}`)).toBe(1)
      expect(sample(after, `voltaic_bus_publishes_total{kind="delivery"}`)).toBeGreaterThanOrEqual(203)
      expect(sample(after, "voltaic_device_actors_hosted")).toBe(1)
      expect(sample(after, "voltaic_device_actors_activated_total")).toBe(1)
      expect(sample(after, "voltaic_event_loop_delay_max_seconds")).toBeGreaterThan(0)
    } finally {
      await client.endAsync(true)
    }

    // The device falls silent: its alert is raised and its webhook called.
    const { value: raised } = await eventually(async () => {
      const text = (await scrape()).text
      return sample(text, `voltaic_notifications_total{channel="webhook",outcome="delivered"}`) === 1 ? text : undefined
    }, 10_000, "the offline alert's webhook")
    expect(webhook.received).toHaveLength(1)
    expect(sample(raised, "voltaic_alerts_raised_total")).toBe(1)
    expect(sample(raised, "voltaic_mqtt_connections")).toBe(0)
  })
})
