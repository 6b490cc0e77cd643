import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { type MqttTestApp, startMqttApp } from "../support/mqtt.ts"

/** An MQTT session is a sign of life of its device: CONNECT and PINGREQ count as `device.seen`. */
describe("MQTT session activity", () => {
  let t: MqttTestApp
  let spaceId: string
  const call = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  const alertsOf = async (ruleId: string, deviceId: string) =>
    ((await call("GET", `/alerts?alertRule.id=${ruleId}`)).body as Array<{ device: { id: string }; state: string }>).filter((a) => a.device.id === deviceId)
  const until = async <A>(probe: () => Promise<A | undefined>, ms: number, what: string): Promise<A> => {
    const deadline = Date.now() + ms
    for (;;) {
      const value = await probe()
      if (value !== undefined) return value
      if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
      await new Promise((r) => setTimeout(r, 50))
    }
  }

  beforeAll(async () => {
    t = await startMqttApp("pglite")
    spaceId = (await call("POST", "/spaces", { name: "Sessions" })).body.id
  })
  afterAll(() => t?.close())

  it("counts a device's CONNECT as a sign of life: a device that only connects goes offline on time", async () => {
    const device = (await call("POST", "/devices", { name: "Connect only", space: { id: spaceId } })).body
    const rule = (await call("POST", "/alertRules", {
      name: "Session gone",
      type: "offline",
      severity: "low",
      space: { id: spaceId },
      config: { afterSeconds: 1 }
    })).body
    // Read (and cached) before the session: the REST read must follow the session's sign of life.
    expect((await call("GET", `/devices/${device.id}`)).body.lastSeenAt).toBeNull()
    const connectedAt = Date.now()
    const client = await t.connectInMemory({ username: device.secretKey, password: " ", keepalive: 0 })
    const seen = await until(async () => {
      const at = (await call("GET", `/devices/${device.id}`)).body.lastSeenAt as number | null
      return at === null ? undefined : at
    }, 3_000, "the device's lastSeenAt after its CONNECT")
    expect(seen).toBeGreaterThanOrEqual(connectedAt)
    // Nothing published: only the CONNECT can have started the device's offline timer.
    const [alert] = await until(async () => {
      const list = await alertsOf(rule.id, device.id)
      return list.length > 0 ? list : undefined
    }, 5_000, "the offline alert of a device that only connected")
    expect(alert.state).toBe("unresolved")
    expect(Date.now() - connectedAt).toBeGreaterThanOrEqual(1_000)
    await client.endAsync(true)
    await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })

  it("counts PINGREQ as a sign of life: a quiet session with keep-alive stays online", async () => {
    const device = (await call("POST", "/devices", { name: "Pinging", space: { id: spaceId } })).body
    const rule = (await call("POST", "/alertRules", {
      name: "Pings",
      type: "offline",
      severity: "low",
      space: { id: spaceId },
      config: { afterSeconds: 2 }
    })).body
    // keepalive 1 s: the client sends PINGREQ every second while it publishes nothing.
    const client = await t.connectInMemory({ username: device.secretKey, password: " ", keepalive: 1 })
    await new Promise((r) => setTimeout(r, 1_500))
    const early = (await call("GET", `/devices/${device.id}`)).body.lastSeenAt as number
    await new Promise((r) => setTimeout(r, 2_000))
    expect(await alertsOf(rule.id, device.id)).toEqual([])
    // The pings moved the stored lastSeenAt too (written behind every second).
    expect((await call("GET", `/devices/${device.id}`)).body.lastSeenAt).toBeGreaterThan(early)
    await client.endAsync(true)
    await until(async () => {
      const list = await alertsOf(rule.id, device.id)
      return list.length > 0 ? list : undefined
    }, 5_000, "the offline alert once the pings stopped")
    await call("PUT", `/alertRules/${rule.id}`, { enabled: false })
  })
})
