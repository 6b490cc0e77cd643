import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { closedBy, type MqttTestApp, startMqttApp } from "../support/mqtt.ts"

describe("removing an organisation user", () => {
  let t: MqttTestApp
  beforeAll(async () => {
    t = await startMqttApp("pglite")
  })
  afterAll(() => t.close())

  it("stops its token on REST and closes its MQTT session within a second", async () => {
    const user = await t.call("POST", "/organisations/users/", {
      key: BOOTSTRAP_KEY,
      body: { emailAddress: "leaver@example.com", fullName: "Leaving Soon", password: "leaving password" }
    })
    const token = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": BOOTSTRAP_KEY },
      body: { username: "leaver@example.com", password: "leaving password" }
    })
    expect(token.status).toBe(200)
    const session = await t.connectInMemory({ username: token.body.accessToken, password: " " })
    expect(session.connected).toBe(true)

    const started = Date.now()
    const removed = await t.call("DELETE", `/organisations/users/${user.body.id}`, { key: BOOTSTRAP_KEY })
    expect(removed.body).toEqual({ removed: true })
    await closedBy(session, 1_000)
    expect(Date.now() - started).toBeLessThan(1_000)
    expect((await t.call("GET", "/whoami", { key: token.body.accessToken })).status).toBe(401)
    session.end(true)
  })
})
