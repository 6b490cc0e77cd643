import { Context, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hashPassword } from "../../src/auth/secrets.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"

type Credential = "none" | "bad" | "app" | "readOnly" | "device" | "user" | "admin" | "other"
const CREDENTIALS: ReadonlyArray<Credential> = ["none", "bad", "app", "readOnly", "device", "user", "admin", "other"]

interface Fixtures {
  keys: Record<Credential, string | undefined>
  spaceId: string
  /** The device whose secret key is the `device` credential. */
  deviceId: string
  /** Another device of the same organisation. */
  siblingId: string
  /** A device of the other organisation (the one of the `other` credential). */
  foreignDeviceId: string
  eventId: string
  siblingEventId: string
  locationId: string
  siblingLocationId: string
  /** A command of `deviceId`, slug `reboot`. */
  commandId: string
  t: TestApp
}

interface Case {
  readonly name: string
  /** Builds the request; may create what it consumes (a delete needs its own target). */
  readonly request: (f: Fixtures) => Promise<{ method: string; path: string; body?: unknown }>
  readonly expected: Record<Credential, number>
}

const row = (none: number, bad: number, app: number, readOnly: number, device: number, user: number, admin: number, other: number) =>
  ({ none, bad, app, readOnly, device, user, admin, other })

const newSpace = async (f: Fixtures) => (await f.t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "scratch" } })).body.id as string
const newDevice = async (f: Fixtures) =>
  (await f.t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "scratch", space: { id: f.spaceId } } })).body.id as string
const newKey = async (f: Fixtures) => (await f.t.call("POST", "/apiKeys", { key: BOOTSTRAP_KEY, body: { name: "scratch" } })).body.id as string
const newCommand = async (f: Fixtures) =>
  (await f.t.call("POST", "/commands", { key: BOOTSTRAP_KEY, body: { name: `scratch ${Math.random().toString(36).slice(2)}`, device: { id: f.deviceId } } }))
    .body.id as string

const CASES: ReadonlyArray<Case> = [
  { name: "GET /whoami", request: async () => ({ method: "GET", path: "/whoami" }), expected: row(401, 401, 200, 200, 200, 200, 200, 200) },
  { name: "GET /devices", request: async () => ({ method: "GET", path: "/devices" }), expected: row(401, 401, 200, 200, 403, 200, 200, 200) },
  { name: "GET /devices/{id}", request: async (f) => ({ method: "GET", path: `/devices/${f.deviceId}` }), expected: row(401, 401, 200, 200, 403, 200, 200, 404) },
  { name: "GET /devices/me", request: async () => ({ method: "GET", path: "/devices/me" }), expected: row(401, 401, 403, 403, 200, 403, 403, 403) },
  {
    name: "POST /devices",
    request: async (f) => ({ method: "POST", path: "/devices", body: { name: "new", space: { id: f.spaceId } } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "PUT /devices/{id}",
    request: async (f) => ({ method: "PUT", path: `/devices/${f.deviceId}`, body: { serialNumber: "SN-1" } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "DELETE /devices/{id}",
    request: async (f) => ({ method: "DELETE", path: `/devices/${await newDevice(f)}` }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "POST /devices/{id}/secretKey",
    request: async (f) => ({ method: "POST", path: `/devices/${await newDevice(f)}/secretKey` }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  { name: "GET /spaces", request: async () => ({ method: "GET", path: "/spaces" }), expected: row(401, 401, 200, 200, 403, 200, 200, 200) },
  { name: "GET /spaces/{id}", request: async (f) => ({ method: "GET", path: `/spaces/${f.spaceId}` }), expected: row(401, 401, 200, 200, 403, 200, 200, 404) },
  { name: "POST /spaces", request: async () => ({ method: "POST", path: "/spaces", body: { name: "s" } }), expected: row(401, 401, 200, 403, 403, 200, 200, 200) },
  {
    name: "DELETE /spaces/{id}",
    request: async (f) => ({ method: "DELETE", path: `/spaces/${await newSpace(f)}` }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  { name: "POST /products", request: async () => ({ method: "POST", path: "/products", body: { name: "p" } }), expected: row(401, 401, 200, 403, 403, 200, 200, 200) },
  { name: "GET /places", request: async () => ({ method: "GET", path: "/places" }), expected: row(401, 401, 200, 200, 403, 200, 200, 200) },
  { name: "GET /gateways", request: async () => ({ method: "GET", path: "/gateways" }), expected: row(401, 401, 200, 200, 403, 200, 200, 200) },
  { name: "GET /apiKeys", request: async () => ({ method: "GET", path: "/apiKeys" }), expected: row(401, 401, 200, 403, 403, 403, 200, 200) },
  { name: "POST /apiKeys", request: async () => ({ method: "POST", path: "/apiKeys", body: { name: "k" } }), expected: row(401, 401, 200, 403, 403, 403, 200, 200) },
  {
    name: "DELETE /apiKeys/{id}",
    request: async (f) => ({ method: "DELETE", path: `/apiKeys/${await newKey(f)}` }),
    expected: row(401, 401, 200, 403, 403, 403, 200, 404)
  },
  {
    name: "POST /organisations",
    request: async () => ({
      method: "POST",
      path: "/organisations",
      body: { name: "Tenant", owner: { emailAddress: `o${Math.random().toString(36).slice(2)}@example.com`, fullName: "O", password: "long enough pw" } }
    }),
    expected: row(401, 401, 200, 403, 403, 403, 200, 403)
  },

  // Device traffic. `other` (an application key of another organisation) naming this
  // organisation's ids gets 404, never 403: it must not learn that they exist. A device key
  // acts for its own device only: naming a sibling (another device of its organisation) in a
  // list, a publish or a read by id is 403 (API-DECISIONS: a valid credential without the
  // right), as its `GET /devices/{id}` is. A read-only key may read but not publish.
  { name: "GET /events/{id}", request: async (f) => ({ method: "GET", path: `/events/${f.eventId}` }), expected: row(401, 401, 200, 200, 200, 200, 200, 404) },
  {
    name: "GET /events/{id} of a sibling device",
    request: async (f) => ({ method: "GET", path: `/events/${f.siblingEventId}` }),
    expected: row(401, 401, 200, 200, 403, 200, 200, 404)
  },
  {
    name: "GET /events?device.id=",
    request: async (f) => ({ method: "GET", path: `/events?device.id=${f.deviceId}` }),
    expected: row(401, 401, 200, 200, 200, 200, 200, 404)
  },
  {
    name: "GET /events?device.id= of a sibling device",
    request: async (f) => ({ method: "GET", path: `/events?device.id=${f.siblingId}` }),
    expected: row(401, 401, 200, 200, 403, 200, 200, 404)
  },
  {
    name: "POST /events",
    request: async (f) => ({ method: "POST", path: "/events", body: { name: "temperature", data: 21.5, device: { id: f.deviceId } } }),
    expected: row(401, 401, 200, 403, 200, 200, 200, 404)
  },
  {
    name: "POST /events for a sibling device",
    request: async (f) => ({ method: "POST", path: "/events", body: { name: "temperature", data: 21.5, device: { id: f.siblingId } } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    // The mirror image: this organisation's credentials naming the other one's device.
    name: "POST /events for the other organisation's device",
    request: async (f) => ({ method: "POST", path: "/events", body: { name: "temperature", data: 21.5, device: { id: f.foreignDeviceId } } }),
    expected: row(401, 401, 404, 403, 403, 404, 404, 200)
  },
  {
    name: "GET /locations/{id}",
    request: async (f) => ({ method: "GET", path: `/locations/${f.locationId}` }),
    expected: row(401, 401, 200, 200, 200, 200, 200, 404)
  },
  {
    name: "GET /locations/{id} of a sibling device",
    request: async (f) => ({ method: "GET", path: `/locations/${f.siblingLocationId}` }),
    expected: row(401, 401, 200, 200, 403, 200, 200, 404)
  },
  {
    name: "GET /locations?device.id=",
    request: async (f) => ({ method: "GET", path: `/locations?device.id=${f.deviceId}` }),
    expected: row(401, 401, 200, 200, 200, 200, 200, 404)
  },
  {
    name: "GET /locations?device.id= of a sibling device",
    request: async (f) => ({ method: "GET", path: `/locations?device.id=${f.siblingId}` }),
    expected: row(401, 401, 200, 200, 403, 200, 200, 404)
  },
  {
    name: "POST /locations",
    request: async (f) => ({ method: "POST", path: "/locations", body: { latitude: 53.35, longitude: -6.26, device: { id: f.deviceId } } }),
    expected: row(401, 401, 200, 403, 200, 200, 200, 404)
  },
  {
    name: "POST /locations for a sibling device",
    request: async (f) => ({ method: "POST", path: "/locations", body: { latitude: 53.35, longitude: -6.26, device: { id: f.siblingId } } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "POST /locations for the other organisation's device",
    request: async (f) => ({ method: "POST", path: "/locations", body: { latitude: 53.35, longitude: -6.26, device: { id: f.foreignDeviceId } } }),
    expected: row(401, 401, 404, 403, 403, 404, 404, 200)
  },
  {
    name: "POST /commands",
    request: async (f) => ({ method: "POST", path: "/commands", body: { name: `c ${Math.random().toString(36).slice(2)}`, device: { id: f.deviceId } } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  { name: "GET /commands/{id}", request: async (f) => ({ method: "GET", path: `/commands/${f.commandId}` }), expected: row(401, 401, 200, 200, 403, 200, 200, 404) },
  {
    name: "PUT /commands/{id}",
    request: async (f) => ({ method: "PUT", path: `/commands/${f.commandId}`, body: { name: "Reboot now" } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "DELETE /commands/{id}",
    request: async (f) => ({ method: "DELETE", path: `/commands/${await newCommand(f)}` }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "GET /commands?device.id=",
    request: async (f) => ({ method: "GET", path: `/commands?device.id=${f.deviceId}` }),
    expected: row(401, 401, 200, 200, 403, 200, 200, 404)
  },
  {
    name: "POST /commands/run",
    request: async (f) => ({ method: "POST", path: "/commands/run", body: { slug: "reboot", device: { id: f.deviceId } } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  },
  {
    name: "POST /commands/run by id",
    request: async (f) => ({ method: "POST", path: "/commands/run", body: { id: f.commandId } }),
    expected: row(401, 401, 200, 403, 403, 200, 200, 404)
  }
]

describe.each(STORE_KINDS)("authorisation matrix on %s", (kind) => {
  const f = {} as Fixtures
  beforeAll(async () => {
    f.t = await startAppOn(kind)
    const t = f.t
    f.spaceId = (await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Home" } })).body.id
    const device = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Meter", space: { id: f.spaceId } } })
    f.deviceId = device.body.id
    const readOnly = await t.call("POST", "/apiKeys", { key: BOOTSTRAP_KEY, body: { name: "dashboard", readOnly: true } })
    const admin = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": BOOTSTRAP_KEY },
      body: { username: ADMIN_EMAIL, password: ADMIN_PASSWORD }
    })
    expect(admin.status).toBe(200)
    // A member without admin rights (user management arrives with its own endpoints).
    const sql = Context.get(t.context, Sql)
    const whoami = await t.call("GET", "/whoami", { key: BOOTSTRAP_KEY })
    const hash = await hashPassword("member password")
    await Effect.runPromise(sql.query(
      "INSERT INTO users (id, email_address, full_name, password_hash, created_at, updated_at) VALUES ('usr_member', 'member@example.com', 'M', $1, 1, 1)",
      [hash]
    ))
    await Effect.runPromise(sql.query(
      "INSERT INTO organisation_users (id, organisation_id, user_id, is_admin, created_at, updated_at) VALUES ('ou_member', $1, 'usr_member', false, 1, 1)",
      [whoami.body.organisation.id]
    ))
    const user = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": BOOTSTRAP_KEY },
      body: { username: "member@example.com", password: "member password" }
    })
    expect(user.status).toBe(200)
    const other = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: "Other", owner: { emailAddress: "other@example.com", fullName: "Other Owner", password: "other password" } }
    })
    expect(other.status).toBe(200)
    // Device traffic: a sibling device, an event and a location of each, a command, and a
    // device of the other organisation (created by naming a new customId).
    const sibling = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Sibling", space: { id: f.spaceId } } })
    f.siblingId = sibling.body.id
    const publish = async (path: string, body: Record<string, unknown>, key = BOOTSTRAP_KEY) => {
      const res = await t.call("POST", path, { key, body })
      expect(res.status, JSON.stringify(res.body)).toBe(200)
      return res.body as { id: string; device: { id: string } }
    }
    f.eventId = (await publish("/events", { name: "boot", device: { id: f.deviceId } })).id
    f.siblingEventId = (await publish("/events", { name: "boot", device: { id: f.siblingId } })).id
    f.locationId = (await publish("/locations", { latitude: 1, longitude: 2, device: { id: f.deviceId } })).id
    f.siblingLocationId = (await publish("/locations", { latitude: 1, longitude: 2, device: { id: f.siblingId } })).id
    f.commandId = (await publish("/commands", { name: "Reboot", device: { id: f.deviceId } })).id
    f.foreignDeviceId = (await publish("/events", { name: "boot", device: { customId: "foreign-meter" } }, other.body.apiKey.secretKey)).device.id
    f.keys = {
      none: undefined,
      bad: "a_sk_not_a_real_key_000000000000",
      app: BOOTSTRAP_KEY,
      readOnly: readOnly.body.secretKey,
      device: device.body.secretKey,
      user: user.body.accessToken,
      admin: admin.body.accessToken,
      other: other.body.apiKey.secretKey
    }
  })
  afterAll(() => f.t.close())

  for (const c of CASES) {
    for (const credential of CREDENTIALS) {
      it(`${c.name} with ${credential} → ${c.expected[credential]}`, async () => {
        const req = await c.request(f)
        const res = await f.t.call(req.method, req.path, { key: f.keys[credential], body: req.body })
        expect(res.status, JSON.stringify(res.body)).toBe(c.expected[credential])
        if (res.status >= 400) expect(res.body.error.status).toBe(res.status)
      })
    }
  }

  it("lists only the caller's organisation", async () => {
    const res = await f.t.call("GET", "/devices", { key: f.keys.other })
    expect(res.body.map((d: { id: string }) => d.id)).not.toContain(f.deviceId)
  })
})
