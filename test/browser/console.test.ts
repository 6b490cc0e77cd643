import mqtt from "mqtt"
import { readFileSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type ConsoleHarness, screenshot, signIn, startConsoleHarness } from "./harness.ts"

interface Alert {
  readonly id: string
  readonly state: string
  readonly resolvedAt: number | null
}

describe("the operator console in a real Chromium", () => {
  let h: ConsoleHarness
  beforeAll(async () => {
    h = await startConsoleHarness()
  }, 120_000)
  afterAll(async () => {
    await h?.close()
  })

  it("signs in with the owner's e-mail and password, creates a space and a device, and shows an MQTT publish live", async () => {
    const { page, errors, elsewhere } = await h.page()
    await signIn(page, h.origin)
    await page.locator("input[name=spaceName]").fill("Plant A")
    await page.getByRole("button", { name: "Create space" }).click()
    await page.locator("[data-testid=spaces] td", { hasText: "Plant A" }).waitFor()

    await page.locator("input[name=deviceName]").fill("Boiler 1")
    await page.locator("input[name=customId]").fill("boiler-1")
    await page.getByRole("button", { name: "Create device" }).click()
    const secret = (await page.locator("[data-testid=secret] code").textContent()) ?? ""
    expect(secret).toMatch(/^d_sk_/)
    await page.locator("[data-testid=secret] button").click()
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret)

    // A refused action says why, in the page.
    await page.locator("input[name=deviceName]").fill("Boiler copy")
    await page.locator("input[name=customId]").fill("boiler-1")
    await page.getByRole("button", { name: "Create device" }).click()
    await page.locator(".notice.error", { hasText: "customId" }).waitFor()

    // Found by its customId; never seen yet.
    await page.locator("input[name=search]").fill("BOILER-1")
    await page.getByTestId("device-count").filter({ hasText: "1 devices" }).waitFor()
    const row = page.locator(".device-row", { hasText: "Boiler 1" })
    await row.waitFor()
    const deviceId = (await row.getAttribute("data-device")) ?? ""
    expect(deviceId).toMatch(/^dev_/)
    expect(await row.locator(".last-seen").getAttribute("data-last-seen")).toBe("")
    await page.getByTestId("live-status").filter({ hasText: "live" }).waitFor()

    const device = await mqtt.connectAsync(`mqtt://127.0.0.1:${h.server.mqttPort}`, { username: secret, password: " ", reconnectPeriod: 0 })
    try {
      let published = performance.now()
      await device.publishAsync(`devices/${deviceId}/events/temperature`, JSON.stringify({ data: { celsius: 21.5 } }), { qos: 1 })
      await row.locator(".last-seen:not([data-last-seen=''])").waitFor({ timeout: 10_000 })
      const rowLatency = performance.now() - published
      await screenshot(page, "console-fleet")

      await row.click()
      await page.getByRole("heading", { name: "Boiler 1" }).waitFor()
      await page.getByTestId("live-stream").locator("li.muted").waitFor()
      published = performance.now()
      await device.publishAsync(`devices/${deviceId}/events/temperature`, JSON.stringify({ data: { celsius: 22.75 } }), { qos: 1 })
      const streamed = page.getByTestId("live-stream").locator("li[data-kind=event]", { hasText: "22.75" })
      await streamed.waitFor({ timeout: 10_000 })
      const streamLatency = performance.now() - published
      // Both events are in the history too, newest first.
      await page.getByTestId("events-history").locator("tbody tr", { hasText: "22.75" }).waitFor()
      expect(await page.getByTestId("events-history").locator("tbody tr").count()).toBe(2)
      await screenshot(page, "console-device")

      // A command added on the page and run from it reaches the device.
      await device.subscribeAsync(`devices/${deviceId}/commands/+/run`, { qos: 1 })
      const ran = new Promise<{ topic: string; body: { slug?: string } }>((resolve) =>
        device.once("message", (topic, payload) => resolve({ topic, body: JSON.parse(payload.toString()) as { slug?: string } })))
      await page.locator("input[name=commandName]").fill("Reboot")
      await page.getByRole("button", { name: "Add command" }).click()
      await page.locator(".commands li", { hasText: "reboot" }).getByRole("button", { name: "Run" }).click()
      const run = await ran
      expect(run.topic).toBe(`devices/${deviceId}/commands/reboot/run`)
      expect(run.body.slug).toBe("reboot")

      // A rotated key: the new one is shown once and works; the old one stops.
      page.once("dialog", (dialog) => void dialog.accept())
      await page.getByRole("button", { name: "Rotate secret key" }).click()
      const rotated = (await page.locator("[data-testid=secret] code").textContent()) ?? ""
      expect(rotated).toMatch(/^d_sk_/)
      expect(rotated).not.toBe(secret)
      const whoami = (key: string) => fetch(`${h.origin}/v1/whoami`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status)
      expect(await whoami(rotated)).toBe(200)
      expect(await whoami(secret)).toBe(401)
      console.log(`console live: fleet row updated ${rowLatency.toFixed(0)} ms after the PUBACK of a publish; device stream ${streamLatency.toFixed(0)} ms`)
    } finally {
      await device.endAsync()
    }
    expect(errors).toEqual([])
    expect(elsewhere).toEqual([])
  }, 120_000)

  it("counts an alert as it opens, resolves it from the alert list, and REST sees it resolved", async () => {
    const space = await h.rest<{ id: string }>("POST", "/spaces", { name: "Alerting space" })
    const device = await h.rest<{ id: string }>("POST", "/devices", { name: "Freezer", space: { id: space.id } })
    await h.rest("POST", "/alertRules", {
      name: "Too warm",
      type: "threshold",
      severity: "high",
      space: { id: space.id },
      config: { eventName: "temperature", max: -10 }
    })
    const { page, errors } = await h.page()
    await signIn(page, h.origin)
    const openCell = page.locator(`[data-space="${space.id}"] .open-alerts`)
    await openCell.filter({ hasText: /^0$/ }).waitFor()
    await page.getByTestId("live-status").filter({ hasText: "live" }).waitFor()

    await h.rest("POST", "/events", { name: "temperature", data: 4, device: { id: device.id } })
    // No reload: the count follows the alert as it opens.
    await openCell.filter({ hasText: /^1$/ }).waitFor({ timeout: 10_000 })
    const [alert] = await h.rest<Array<Alert>>("GET", `/alerts?unresolved=true&space.id=${space.id}`)
    expect(alert.state).toBe("unresolved")

    // Acknowledged from its device's page…
    await page.goto(`${h.origin}/devices/${device.id}`)
    const onDevice = page.locator(`[data-alert="${alert.id}"]`)
    await onDevice.getByRole("button", { name: "Acknowledge" }).click()
    await onDevice.locator(".alert-state", { hasText: "acknowledged" }).waitFor()
    const acknowledged = await h.rest<Alert & { acknowledgedAt: number | null }>("GET", `/alerts/${alert.id}`)
    expect(acknowledged.state).toBe("acknowledged")
    expect(acknowledged.acknowledgedAt).not.toBeNull()

    // …and resolved from the list.
    await page.getByRole("link", { name: "Alerts" }).click()
    const row = page.locator(`[data-alert="${alert.id}"]`)
    await row.waitFor()
    await screenshot(page, "console-alerts")
    await row.getByRole("button", { name: "Resolve" }).click()
    await row.waitFor({ state: "detached" })

    const resolved = await h.rest<Alert>("GET", `/alerts/${alert.id}`)
    expect(resolved.state).toBe("resolved")
    expect(resolved.resolvedAt).not.toBeNull()
    await page.getByRole("link", { name: "Fleet" }).click()
    await openCell.filter({ hasText: /^0$/ }).waitFor()
    // A new occurrence opens a new alert, resolved elsewhere: the count follows both, no reload.
    await h.rest("POST", "/events", { name: "temperature", data: 6, device: { id: device.id } })
    await openCell.filter({ hasText: /^1$/ }).waitFor({ timeout: 10_000 })
    const [again] = await h.rest<Array<Alert>>("GET", `/alerts?unresolved=true&space.id=${space.id}`)
    expect(again.id).not.toBe(alert.id)
    await h.rest("PUT", `/alerts/${again.id}/resolve`, {})
    await openCell.filter({ hasText: /^0$/ }).waitFor({ timeout: 10_000 })
    expect(errors).toEqual([])
  }, 120_000)

  it("draws imported readings on the energy page and downloads what it shows as CSV", async () => {
    const space = await h.rest<{ id: string }>("POST", "/spaces", { name: "Metered space" })
    const device = await h.rest<{ id: string }>("POST", "/devices", { name: "Meter", space: { id: space.id } })
    const hour = 3_600_000
    const top = Math.floor(Date.now() / hour) * hour
    // Six hourly readings of 1..6 kWh in the last twelve hours.
    const rows = [1, 2, 3, 4, 5, 6].map((k) => ({ device: device.id, timestamp: top - k * hour + 60_000, value: k }))
    await h.rest("POST", "/energy/electricity/readings", rows)

    const { page, errors } = await h.page()
    await signIn(page, h.origin)
    await page.getByRole("link", { name: "Energy" }).click()
    await page.locator("select[name=space]").selectOption(space.id)
    await page.locator("select[name=period]").selectOption("range")
    const local = (ms: number) => new Date(ms).toISOString().slice(0, 16)
    await page.locator("input[name=since]").fill(local(top - 12 * hour))
    await page.locator("input[name=until]").fill(local(top + hour))
    const chart = page.getByTestId("energy-chart")
    // Thirteen hourly buckets, the empty ones as 0: every one is a point.
    await page.locator("[data-testid=energy-chart][data-points='13']").waitFor({ timeout: 20_000 })
    // And the line is on the canvas: pixels in the series' colour (#2b6cb0).
    const drawn = await chart.locator("canvas").evaluate((canvas: HTMLCanvasElement) => {
      const context = canvas.getContext("2d")
      if (context === null) return 0
      const { data } = context.getImageData(0, 0, canvas.width, canvas.height)
      let count = 0
      for (let i = 0; i < data.length; i += 4) if (Math.abs(data[i] - 0x2b) < 8 && Math.abs(data[i + 1] - 0x6c) < 8 && Math.abs(data[i + 2] - 0xb0) < 8) count++
      return count
    })
    expect(drawn).toBeGreaterThan(100)
    await screenshot(page, "console-energy")

    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: "Download CSV" }).click()])
    const csv = readFileSync((await download.path()) ?? "", "utf8").trim().split("\n")
    expect(csv[0]).toBe("timestamp,electricity (kWh)")
    expect(csv.length).toBe(14)
    const values = csv.slice(1).map((line) => Number(line.split(",")[1]))
    expect(values.reduce((a, b) => a + b, 0)).toBe(21)
    expect(values.filter((v) => v > 0).sort()).toEqual([1, 2, 3, 4, 5, 6])

    // The device picked by id, broken down by device: one series named after it.
    await page.locator("input[name=device]").fill(device.id)
    await page.locator("select[name=breakdown]").selectOption("device")
    await chart.locator(".u-legend", { hasText: device.id }).waitFor()
    await page.locator("[data-testid=energy-chart][data-points='13']").waitFor()
    expect(errors).toEqual([])
  }, 120_000)

  it("gives a read-only key a read-only console, which the server would refuse anyway", async () => {
    const key = await h.rest<{ secretKey: string }>("POST", "/apiKeys", { name: "wall screen", readOnly: true })
    const { page, errors } = await h.page()
    await signIn(page, h.origin, { key: key.secretKey })
    await page.getByTestId("who").filter({ hasText: "read-only" }).waitFor()
    await page.locator("[data-testid=spaces] td", { hasText: "Plant A" }).waitFor()
    expect(await page.getByRole("button", { name: "Create space" }).count()).toBe(0)
    expect(await page.getByRole("button", { name: "Create device" }).count()).toBe(0)
    await page.getByRole("link", { name: "Alerts" }).click()
    await page.getByTestId("rules").waitFor()
    expect(await page.getByRole("button", { name: "Create rule" }).count()).toBe(0)
    const status = await page.evaluate(async (secret) => {
      const response = await fetch("/v1/spaces", { method: "POST", headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" }, body: JSON.stringify({ name: "nope" }) })
      return response.status
    }, key.secretKey)
    expect(status).toBe(403)
    await screenshot(page, "console-read-only")
    expect(errors).toEqual([])
  }, 120_000)

  it("says so when the session ends (a revoked token) and offers the sign-in again", async () => {
    const { page, errors } = await h.page()
    await signIn(page, h.origin)
    const token = await page.evaluate(() => (JSON.parse(sessionStorage.getItem("voltaic.session") ?? "{}") as { credential?: string }).credential)
    expect(token).toMatch(/^u_at_/)
    await h.rest("POST", "/auth/token/revoke", { token })
    // The next request finds the token revoked. One of the fleet page's may have been in flight and
    // ended the session already (the link is gone then: the CI run of 2026-11-26 22:17 waited 30 s
    // for it); else the click's requests do.
    await page.getByRole("link", { name: "Alerts" }).click({ timeout: 2_000 }).catch(() => undefined)
    await page.locator(".notice", { hasText: "Your session ended" }).waitFor()
    await page.locator("input[name=email]").waitFor()
    await screenshot(page, "console-session-ended")
    // Signed in again, a device that is not there is a message in the page, not a blank one.
    await signIn(page, h.origin)
    await page.goto(`${h.origin}/devices/dev_not_there`)
    await page.locator(".notice.error", { hasText: "dev_not_there" }).waitFor()
    expect(errors).toEqual([])
  }, 120_000)

  it("shows a server error as a message, and a page that fails to draw as a message, never a blank page", async () => {
    const { page, context } = await h.page()
    await signIn(page, h.origin)
    // The rules answer 500 with the interface's error body; the alerts answer a shape the page cannot draw.
    await context.route("**/v1/alertRules?**", (route) =>
      route.fulfill({ status: 500, contentType: "application/json", body: JSON.stringify({ error: { status: 500, code: "internal", message: "the server failed to answer this request; it has been logged" } }) }))
    await context.route("**/v1/alerts?**", (route) => route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify([{ id: "alt_broken" }]) }))
    await page.getByRole("link", { name: "Alerts" }).click()
    await page.locator(".notice.error", { hasText: "This page failed" }).waitFor()
    await screenshot(page, "console-page-failed")
    await context.unroute("**/v1/alerts?**")
    await page.getByRole("button", { name: "Try again" }).click()
    await page.getByTestId("alerts").waitFor()
    await page.locator(".notice.error", { hasText: "The server failed: the server failed to answer this request" }).waitFor()
    // The rest of the console still works: the header and the other pages.
    await page.getByRole("link", { name: "Fleet" }).click()
    await page.getByTestId("spaces").waitFor()
  }, 120_000)

  it("manages users, teams and each space's alert recipients on the people page", async () => {
    const space = await h.rest<{ id: string }>("POST", "/spaces", { name: "Watched space" })
    const { page, errors } = await h.page()
    await signIn(page, h.origin)
    await page.getByRole("link", { name: "People" }).click()
    await page.locator("input[name=userEmail]").fill("night.shift@example.com")
    await page.locator("input[name=userName]").fill("Night Shift")
    await page.getByRole("button", { name: "Add user" }).click()
    await page.getByTestId("users").locator("td", { hasText: "night.shift@example.com" }).waitFor()
    const [user] = (await h.rest<Array<{ id: string; emailAddress: string }>>("GET", "/organisations/users?limit=200"))
      .filter((u) => u.emailAddress === "night.shift@example.com")

    await page.locator("input[name=teamName]").fill("Operators")
    await page.getByRole("button", { name: "Create team" }).click()
    const team = page.locator(".card", { has: page.getByRole("heading", { name: "Operators" }) })
    await team.getByRole("combobox", { name: "Add a member" }).selectOption(user.id)
    await team.getByRole("button", { name: "Add" }).click()
    await team.locator("li", { hasText: "Night Shift" }).waitFor()

    const recipients = page.locator(`[data-space-recipients="${space.id}"]`)
    await recipients.getByRole("combobox", { name: "Add a recipient" }).selectOption(user.id)
    await recipients.getByRole("button", { name: "Add" }).click()
    await recipients.locator("li", { hasText: "night.shift@example.com" }).waitFor()
    await screenshot(page, "console-people")

    const teams = await h.rest<Array<{ name: string; members: Array<{ id: string }> }>>("GET", "/teams/")
    expect(teams.find((t) => t.name === "Operators")?.members.map((m) => m.id)).toEqual([user.id])
    const watched = await h.rest<{ alertUsers: Array<{ id: string }> }>("GET", `/spaces/${space.id}`)
    expect(watched.alertUsers.map((u) => u.id)).toEqual([user.id])
    expect(errors).toEqual([])
  }, 120_000)
})
