import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { type MqttTestApp, startMqttApp } from "../support/mqtt.ts"
import { smtpSink, webhookReceiver } from "../notify/support.ts"

const eventually = async <A>(probe: () => Promise<A | undefined> | A | undefined, ms: number, what: string): Promise<A> => {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

describe("a device that falls silent, end to end", () => {
  let t: MqttTestApp
  let webhook: Awaited<ReturnType<typeof webhookReceiver>>
  let smtp: Awaited<ReturnType<typeof smtpSink>>
  beforeAll(async () => {
    webhook = await webhookReceiver([200])
    smtp = await smtpSink()
    t = await startMqttApp("pglite", { env: { SMTP_URL: `smtp://alice:s3cret@127.0.0.1:${smtp.port}`, SMTP_FROM: "Voltaic <alerts@example.com>" } })
  })
  afterAll(async () => {
    await t.close()
    await webhook.close()
    await smtp.close()
  })

  it("raises the alert, calls the webhook, e-mails the subscribed user, and resolves when the device returns", async () => {
    const call = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
    const space = (await call("POST", "/spaces", { name: "Cold store" })).body
    const device = (await call("POST", "/devices", { name: "Freezer 3", space: { id: space.id } })).body
    const user = (await call("POST", "/organisations/users/", { emailAddress: "oncall@example.com", fullName: "On Call" })).body
    await call("POST", `/spaces/${space.id}/alerts/users/${user.id}`)
    const hook = (await call("POST", "/notificationTemplates", {
      type: "webhook",
      title: "{{alertRule.name}}",
      body: "{\"alert\":\"{{alert.id}}\",\"device\":\"{{device.name}}\"}",
      webhookUrl: webhook.url,
      webhookHeaders: { "x-signature": "abc" }
    })).body
    const mail = (await call("POST", "/notificationTemplates", {
      type: "email",
      title: "{{device.name}} is offline",
      body: "Rule {{alertRule.name}} fired for {{device.name}}."
    })).body
    const viaWebhook = (await call("POST", "/alertRules", {
      name: "Freezer silent",
      type: "offline",
      severity: "critical",
      autoResolve: true,
      space: { id: space.id },
      notificationTemplate: { id: hook.id },
      config: { afterSeconds: 1 }
    })).body
    await call("POST", "/alertRules", {
      name: "Freezer silent (mail)",
      type: "offline",
      severity: "high",
      autoResolve: true,
      space: { id: space.id },
      notificationTemplate: { id: mail.id },
      config: { afterSeconds: 1 }
    })

    const client = await t.connectInMemory({ username: device.secretKey, password: " " })
    await client.publishAsync(`devices/${device.id}/events/temperature`, JSON.stringify({ data: -18 }), { qos: 1 })
    client.end(true)

    const alerts = await eventually(async () => {
      const list = (await call("GET", "/alerts?unresolved=true")).body as Array<{ id: string; alertRule: { id: string } }>
      return list.length === 2 ? list : undefined
    }, 5_000, "two open alerts")
    const hooked = alerts.find((a) => a.alertRule.id === viaWebhook.id)
    expect(hooked).toBeDefined()

    const request = await eventually(() => webhook.received[0], 5_000, "the webhook call")
    expect(request.headers["x-signature"]).toBe("abc")
    expect(JSON.parse(request.body)).toEqual({ alert: hooked?.id, device: "Freezer 3" })

    const message = await eventually(() => smtp.messages[0], 5_000, "the e-mail")
    expect(message.recipients).toEqual(["oncall@example.com"])
    expect(message.raw).toContain("Freezer 3 is offline")
    expect(message.raw).toContain("Rule Freezer silent (mail) fired for Freezer 3.")

    const recorded = await eventually(async () => {
      const alert = (await call("GET", `/alerts/${hooked?.id}`)).body
      return alert.notifications.length > 0 ? alert.notifications : undefined
    }, 5_000, "the recorded outcome")
    expect(recorded[0]).toMatchObject({ channel: "webhook", status: "delivered", attempts: 1 })

    const back = await t.connectInMemory({ username: device.secretKey, password: " " })
    await back.publishAsync("events", JSON.stringify({ name: "temperature", data: -19 }), { qos: 1 })
    back.end(true)
    await eventually(async () => {
      const open = (await call("GET", "/alerts?unresolved=true")).body as Array<unknown>
      return open.length === 0 ? true : undefined
    }, 3_000, "the resolution of both alerts")
    expect((await call("GET", "/alerts?resolved=true")).body).toHaveLength(2)
  })
})
