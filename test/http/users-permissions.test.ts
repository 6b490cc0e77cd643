import { Context, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hashSecret } from "../../src/auth/secrets.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"

type Who = "admin" | "member" | "management" | "expired" | "device" | "otherAdmin"
const WHO: ReadonlyArray<Who> = ["admin", "member", "management", "expired", "device", "otherAdmin"]

interface World {
  t: TestApp
  keys: Record<Who, string>
  org: string
  memberId: string
  spaceId: string
}

interface Case {
  readonly name: string
  readonly request: (w: World) => Promise<{ method: string; path: string; body?: unknown }>
  readonly expected: Record<Who, number>
}

const row = (admin: number, member: number, management: number, expired: number, device: number, otherAdmin: number) =>
  ({ admin, member, management, expired, device, otherAdmin })

let counter = 0
const freshUser = async (w: World) =>
  (await w.t.call("POST", "/organisations/users/", { key: BOOTSTRAP_KEY, body: { emailAddress: `u${counter++}@example.com`, fullName: "Temp" } })).body.id as string
const freshTeam = async (w: World) =>
  (await w.t.call("POST", "/teams/", { key: BOOTSTRAP_KEY, body: { organisationId: w.org, name: "Temp" } })).body.id as string

const CASES: ReadonlyArray<Case> = [
  { name: "GET /teams/", request: async () => ({ method: "GET", path: "/teams/" }), expected: row(200, 403, 200, 401, 403, 200) },
  { name: "POST /teams/", request: async (w) => ({ method: "POST", path: "/teams/", body: { organisationId: w.org, name: "T" } }), expected: row(200, 403, 200, 401, 403, 404) },
  { name: "GET /teams/{id}", request: async (w) => ({ method: "GET", path: `/teams/${await freshTeam(w)}` }), expected: row(200, 403, 200, 401, 403, 404) },
  { name: "DELETE /teams/{id}", request: async (w) => ({ method: "DELETE", path: `/teams/${await freshTeam(w)}` }), expected: row(200, 403, 200, 401, 403, 404) },
  {
    name: "POST /teams/{id}/members",
    request: async (w) => ({ method: "POST", path: `/teams/${await freshTeam(w)}/members`, body: { organisationUserId: w.memberId } }),
    expected: row(200, 403, 200, 401, 403, 404)
  },
  {
    name: "DELETE /teams/{id}/members/{ou}",
    request: async (w) => {
      const team = await freshTeam(w)
      await w.t.call("POST", `/teams/${team}/members`, { key: BOOTSTRAP_KEY, body: { organisationUserId: w.memberId } })
      return { method: "DELETE", path: `/teams/${team}/members/${w.memberId}` }
    },
    expected: row(200, 403, 200, 401, 403, 404)
  },
  {
    name: "POST /organisations/users/",
    request: async () => ({ method: "POST", path: "/organisations/users/", body: { emailAddress: `n${counter++}@example.com`, fullName: "N" } }),
    expected: row(200, 403, 200, 401, 403, 200)
  },
  { name: "GET /organisations/users", request: async () => ({ method: "GET", path: "/organisations/users" }), expected: row(200, 403, 200, 401, 403, 200) },
  { name: "GET /organisations/{ou}", request: async (w) => ({ method: "GET", path: `/organisations/${w.memberId}` }), expected: row(200, 403, 200, 401, 403, 404) },
  {
    name: "PUT /organisations/users/{ou}",
    request: async (w) => ({ method: "PUT", path: `/organisations/users/${await freshUser(w)}`, body: { isAdmin: false } }),
    expected: row(200, 403, 200, 401, 403, 404)
  },
  {
    name: "DELETE /organisations/users/{ou}",
    request: async (w) => ({ method: "DELETE", path: `/organisations/users/${await freshUser(w)}` }),
    expected: row(200, 403, 200, 401, 403, 404)
  },
  { name: "GET /spaces", request: async () => ({ method: "GET", path: "/spaces" }), expected: row(200, 200, 200, 401, 403, 200) },
  {
    name: "POST /spaces/{id}/alerts/users/{ou}",
    request: async (w) => ({ method: "POST", path: `/spaces/${w.spaceId}/alerts/users/${w.memberId}` }),
    expected: row(200, 403, 200, 401, 403, 404)
  },
  {
    name: "DELETE /spaces/{id}/alerts/users/{ou}",
    request: async (w) => {
      await w.t.call("POST", `/spaces/${w.spaceId}/alerts/users/${w.memberId}`, { key: BOOTSTRAP_KEY })
      return { method: "DELETE", path: `/spaces/${w.spaceId}/alerts/users/${w.memberId}` }
    },
    expected: row(200, 403, 200, 401, 403, 404)
  },
  { name: "POST /managementClients", request: async () => ({ method: "POST", path: "/managementClients", body: { name: "c" } }), expected: row(200, 403, 403, 401, 403, 200) }
]

describe("user-management permission matrix", () => {
  const w = {} as World
  beforeAll(async () => {
    w.t = await startAppOn("pglite")
    const t = w.t
    const signIn = (username: string, password: string, appKey = BOOTSTRAP_KEY) =>
      t.call("POST", "/auth/token", { headers: { "x-app-key": appKey }, body: { username, password } })
    w.org = (await t.call("GET", "/whoami", { key: BOOTSTRAP_KEY })).body.organisation.id
    const member = await t.call("POST", "/organisations/users/", { key: BOOTSTRAP_KEY, body: { emailAddress: "member@example.com", fullName: "Member M", password: "member password" } })
    w.memberId = member.body.id
    w.spaceId = (await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "S" } })).body.id
    const device = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "D", space: { id: w.spaceId } } })
    const client = (await t.call("POST", "/managementClients", { key: BOOTSTRAP_KEY, body: { name: "m" } })).body
    const token = async () =>
      (await t.call("POST", "/oauth/token", { body: { grant_type: "client_credentials", client_id: client.clientId, client_secret: client.clientSecret } })).body.access_token as string
    const management = await token()
    const expired = await token()
    await Effect.runPromise(Context.get(t.context, Sql).query("UPDATE management_tokens SET expires_at = 1 WHERE token_hash = $1", [hashSecret(expired)]))
    const other = await t.call("POST", "/organisations", { key: BOOTSTRAP_KEY, body: { name: "Other", owner: { emailAddress: "boss@other.example", fullName: "Boss", password: "other password" } } })
    w.keys = {
      admin: (await signIn(ADMIN_EMAIL, ADMIN_PASSWORD)).body.accessToken,
      member: (await signIn("member@example.com", "member password")).body.accessToken,
      management,
      expired,
      device: device.body.secretKey,
      otherAdmin: (await signIn("boss@other.example", "other password", other.body.apiKey.secretKey)).body.accessToken
    }
    expect((await t.call("GET", "/teams/", { key: management })).status).toBe(200)
  })
  afterAll(() => w.t.close())

  for (const c of CASES) {
    for (const who of WHO) {
      it(`${c.name} as ${who} → ${c.expected[who]}`, async () => {
        const req = await c.request(w)
        const res = await w.t.call(req.method, req.path, { key: w.keys[who], body: req.body })
        expect(res.status, JSON.stringify(res.body)).toBe(c.expected[who])
      })
    }
  }
})
