import { Context, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_QUEUED_FRAMES } from "../../src/adapters/http/routes/stream.ts"
import { Bus } from "../../src/bus/Bus.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { eventually } from "../support/eventually.ts"

/** Reads server-sent events from a response body, one frame at a time. */
const frames = (response: Response) => {
  if (response.body === null) throw new Error("the stream has no body")
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  return {
    next: async (): Promise<{ event: string; data: unknown }> => {
      for (;;) {
        const end = buffer.indexOf("\n\n")
        if (end !== -1) {
          const frame = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          if (frame.startsWith(":")) continue
          const event = /^event: (.*)$/m.exec(frame)?.[1] ?? "message"
          const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n")
          return { event, data: JSON.parse(data) }
        }
        const { value, done } = await reader.read()
        if (done) throw new Error("the stream ended")
        buffer += decoder.decode(value, { stream: true })
      }
    },
    close: () => reader.cancel()
  }
}

describe("what the console asks of the REST interface", () => {
  let t: TestApp
  let spaceId: string
  beforeAll(async () => {
    t = await startAppOn("pglite")
    spaceId = (await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Site" } })).body.id
  })
  afterAll(() => t.close())

  it("signs a user in by e-mail and password without an application key, and names the field it misses", async () => {
    const signedIn = await t.call("POST", "/auth/signIn", { body: { emailAddress: ADMIN_EMAIL.toUpperCase(), password: ADMIN_PASSWORD } })
    expect(signedIn.status).toBe(200)
    expect(signedIn.body.accessToken).toMatch(/^u_at_/)
    const me = await t.call("GET", "/whoami", { key: signedIn.body.accessToken })
    expect(me.body).toMatchObject({ kind: "user", user: { emailAddress: ADMIN_EMAIL, isAdmin: true } })

    const wrong = await t.call("POST", "/auth/signIn", { body: { emailAddress: ADMIN_EMAIL, password: "not it" } })
    expect(wrong.status).toBe(401)
    const nobody = await t.call("POST", "/auth/signIn", { body: { emailAddress: "nobody@example.com", password: ADMIN_PASSWORD } })
    expect(nobody.status).toBe(401)
    expect(nobody.body.error.message).toBe(wrong.body.error.message)
    const missing = await t.call("POST", "/auth/signIn", { body: { password: ADMIN_PASSWORD } })
    expect(missing.status).toBe(400)
    expect(missing.body.error.field).toBe("emailAddress")
  })

  it("asks which organisation when the user belongs to several", async () => {
    const created = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: "Second", owner: { emailAddress: "second@example.com", fullName: "Second Owner", password: "another good password" } }
    })
    expect(created.status).toBe(200)
    const added = await t.call("POST", "/organisations/users/", { key: created.body.apiKey.secretKey, body: { emailAddress: ADMIN_EMAIL, fullName: "Visitor" } })
    expect(added.status).toBe(200)
    const ambiguous = await t.call("POST", "/auth/signIn", { body: { emailAddress: ADMIN_EMAIL, password: ADMIN_PASSWORD } })
    expect(ambiguous.status).toBe(400)
    expect(ambiguous.body.error.field).toBe("organisationId")
    const named = await t.call("POST", "/auth/signIn", { body: { emailAddress: ADMIN_EMAIL, password: ADMIN_PASSWORD, organisationId: created.body.organisation.id } })
    expect(named.status).toBe(200)
    const me = await t.call("GET", "/whoami", { key: named.body.accessToken })
    expect(me.body.organisation.id).toBe(created.body.organisation.id)
  })

  it("finds devices by a part of their name or customId, in any case, LIKE's characters taken as they are", async () => {
    for (const [name, customId] of [["Boiler Room", "br-1"], ["Heat pump", "PUMP-7"], ["100% meter", "m_1"]]) {
      expect((await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name, customId, space: { id: spaceId } } })).status).toBe(200)
    }
    const names = async (search: string) => {
      const answer = await t.call("GET", `/devices?search=${encodeURIComponent(search)}&space.id=${spaceId}`, { key: BOOTSTRAP_KEY })
      expect(answer.headers.get("x-total-count")).toBe(String(answer.body.length))
      return (answer.body as Array<{ name: string }>).map((d) => d.name).sort()
    }
    expect(await names("boiler")).toEqual(["Boiler Room"])
    expect(await names("pump")).toEqual(["Heat pump"])
    expect(await names("pump-7")).toEqual(["Heat pump"])
    expect(await names("%")).toEqual(["100% meter"])
    expect(await names("_")).toEqual(["100% meter"])
    expect(await names("")).toEqual(["100% meter", "Boiler Room", "Heat pump"])
  })

  it("lists one device's alerts", async () => {
    const make = async (name: string) => (await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name, space: { id: spaceId } } })).body.id as string
    const [hot, cold] = [await make("Hot"), await make("Cold")]
    await t.call("POST", "/alertRules", {
      key: BOOTSTRAP_KEY,
      body: { name: "Over 50", type: "threshold", severity: "low", space: { id: spaceId }, config: { eventName: "heat", max: 50 } }
    })
    await t.call("POST", "/events", { key: BOOTSTRAP_KEY, body: { name: "heat", data: 90, device: { id: hot } } })
    await t.call("POST", "/events", { key: BOOTSTRAP_KEY, body: { name: "heat", data: 10, device: { id: cold } } })
    const { value } = await eventually(async () => {
      const list = await t.call("GET", `/alerts?device.id=${hot}`, { key: BOOTSTRAP_KEY })
      return list.body.length > 0 ? list.body : undefined
    }, 10_000, "the alert of the hot device")
    expect(value.map((a: { device: { id: string } }) => a.device.id)).toEqual([hot])
    expect((await t.call("GET", `/alerts?device.id=${cold}`, { key: BOOTSTRAP_KEY })).body).toEqual([])
  })

  it("streams the organisation's deliveries as server-sent events, one device's with device.id", async () => {
    const make = async (name: string) => (await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name, space: { id: spaceId } } })).body.id as string
    const [one, two] = [await make("One"), await make("Two")]
    const refused = await t.app.request("/v1/stream")
    expect(refused.status).toBe(401)

    const response = await t.app.request("/v1/stream", { headers: { authorization: `Bearer ${BOOTSTRAP_KEY}` } })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const all = frames(response)
    const narrowed = frames(await t.app.request(`/v1/stream?device.id=${two}`, { headers: { authorization: `Bearer ${BOOTSTRAP_KEY}` } }))
    try {
      expect((await all.next()).event).toBe("ready")
      expect((await narrowed.next()).event).toBe("ready")
      // Another organisation's traffic is not ours to see.
      const other = await t.call("POST", "/organisations", {
        key: BOOTSTRAP_KEY,
        body: { name: "Elsewhere", owner: { emailAddress: "elsewhere@example.com", fullName: "Else", password: "a third good password" } }
      })
      const otherKey = other.body.apiKey.secretKey as string
      const otherSpace = (await t.call("POST", "/spaces", { key: otherKey, body: { name: "Theirs" } })).body.id
      const otherDevice = (await t.call("POST", "/devices", { key: otherKey, body: { name: "Theirs", space: { id: otherSpace } } })).body.id
      expect((await t.call("POST", "/events", { key: otherKey, body: { name: "secret", data: 1, device: { id: otherDevice } } })).status).toBe(200)
      await t.call("POST", "/events", { key: BOOTSTRAP_KEY, body: { name: "power", data: { watts: 5 }, device: { id: one } } })
      await t.call("POST", "/locations", { key: BOOTSTRAP_KEY, body: { latitude: 1.5, longitude: 2.5, device: { id: two } } })
      const first = await all.next()
      expect(first).toMatchObject({ event: "event", data: { topic: `devices/${one}/events/power`, deviceId: one, resource: { name: "power", data: { watts: 5 } } } })
      expect(await all.next()).toMatchObject({ event: "location", data: { deviceId: two, resource: { latitude: "1.5" } } })
      // The narrowed stream skipped device one's event.
      expect(await narrowed.next()).toMatchObject({ event: "location", data: { deviceId: two } })
    } finally {
      await all.close()
      await narrowed.close()
    }
  })

  it("ends the stream of a client that stops reading, once its backlog passes the bound, with an overflow event", async () => {
    const deviceId = (await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Chatty", space: { id: spaceId } } })).body.id as string
    const me = (await t.call("GET", "/whoami", { key: BOOTSTRAP_KEY })).body.organisation
    const bus = Option.getOrThrow(Context.getOption(t.context, Bus))
    const stream = frames(await t.app.request(`/v1/stream?device.id=${deviceId}`, { headers: { authorization: `Bearer ${BOOTSTRAP_KEY}` } }))
    try {
      expect((await stream.next()).event).toBe("ready")
      // Nothing is read while more than the bound arrives.
      const payload = JSON.stringify({ name: "tick", data: 1 })
      for (let i = 0; i < MAX_QUEUED_FRAMES + 50; i++) {
        bus.send({ organisationId: me.id, deviceId, topic: `devices/${deviceId}/events/tick`, payload })
      }
      let events = 0
      let last = ""
      await eventually(async () => {
        for (;;) {
          const frame = await stream.next().catch(() => undefined)
          if (frame === undefined) return true
          last = frame.event
          if (frame.event === "event") events++
        }
      }, 30_000, "the stream's end")
      expect(last).toBe("overflow")
      expect(events).toBeGreaterThan(MAX_QUEUED_FRAMES - 10)
      expect(events).toBeLessThan(MAX_QUEUED_FRAMES + 50)
    } finally {
      await stream.close().catch(() => undefined)
    }
  })
})
