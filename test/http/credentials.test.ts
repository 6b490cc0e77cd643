import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"

describe("credentials", () => {
  let t: TestApp
  let spaceId: string
  beforeAll(async () => {
    t = await startAppOn("pglite")
    spaceId = (await t.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Home" } })).body.id
  })
  afterAll(() => t.close())

  const signIn = (password = ADMIN_PASSWORD) =>
    t.call("POST", "/auth/token", { headers: { "x-app-key": BOOTSTRAP_KEY }, body: { username: ADMIN_EMAIL, password } })

  it("accepts an application key as bearer, ?access_token= and x-app-key", async () => {
    expect((await t.call("GET", "/whoami", { key: BOOTSTRAP_KEY })).status).toBe(200)
    expect((await t.call("GET", `/whoami?access_token=${BOOTSTRAP_KEY}`)).status).toBe(200)
    expect((await t.call("GET", "/whoami", { headers: { "x-app-key": BOOTSTRAP_KEY } })).status).toBe(200)
  })

  it("treats an empty bearer as absent and lets the bearer decide over x-app-key", async () => {
    const empty = await t.call("GET", "/whoami", { headers: { authorization: "Bearer " } })
    expect(empty.status).toBe(401)
    expect(empty.body.error.message).toMatch(/not authenticated/)
    const device = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "d", space: { id: spaceId } } })
    const both = await t.call("GET", "/whoami", { key: device.body.secretKey, headers: { "x-app-key": BOOTSTRAP_KEY } })
    expect(both.body.kind).toBe("device")
  })

  it("describes each credential kind in /whoami", async () => {
    const app = await t.call("GET", "/whoami", { key: BOOTSTRAP_KEY })
    expect(app.body).toMatchObject({ kind: "app", organisation: { name: "Default organisation" } })
    expect(app.body.id).toMatch(/^key_/)

    const device = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "d", space: { id: spaceId } } })
    const asDevice = await t.call("GET", "/whoami", { key: device.body.secretKey })
    expect(asDevice.body).toMatchObject({ id: device.body.id, kind: "device", device: { id: device.body.id } })

    const token = await signIn()
    const asUser = await t.call("GET", "/whoami", { key: token.body.accessToken })
    expect(asUser.body).toMatchObject({ kind: "user", scope: "user", user: { emailAddress: ADMIN_EMAIL, isAdmin: true } })
    expect(asUser.body.id).toMatch(/^usr_/)
    expect(asUser.body.user.organisationUserId).toMatch(/^ou_/)
  })

  it("shows a device secret key once and answers GET /devices/me for it", async () => {
    const created = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Once", space: { id: spaceId } } })
    expect(created.body.secretKey).toMatch(/^d_sk_/)
    const read = await t.call("GET", `/devices/${created.body.id}`, { key: BOOTSTRAP_KEY })
    expect(read.body.secretKey).toBeUndefined()
    const me = await t.call("GET", "/devices/me", { key: created.body.secretKey })
    expect(me.body.id).toBe(created.body.id)
  })

  it("stops the old device key at once when it is rotated", async () => {
    const created = await t.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Rotating", space: { id: spaceId } } })
    const old = created.body.secretKey
    expect((await t.call("GET", "/devices/me", { key: old })).status).toBe(200)
    const rotated = await t.call("POST", `/devices/${created.body.id}/secretKey`, { key: BOOTSTRAP_KEY })
    expect(rotated.body.secretKey).toMatch(/^d_sk_/)
    expect(rotated.body.secretKey).not.toBe(old)
    expect((await t.call("GET", "/devices/me", { key: old })).status).toBe(401)
    expect((await t.call("GET", "/devices/me", { key: rotated.body.secretKey })).status).toBe(200)
  })

  it("stops a deleted application key at once and never lists secrets", async () => {
    const created = await t.call("POST", "/apiKeys", { key: BOOTSTRAP_KEY, body: { name: "temp" } })
    expect(created.body.secretKey).toMatch(/^a_sk_/)
    expect((await t.call("GET", "/whoami", { key: created.body.secretKey })).status).toBe(200)
    const list = await t.call("GET", "/apiKeys", { key: BOOTSTRAP_KEY })
    expect(JSON.stringify(list.body)).not.toContain(created.body.secretKey)
    expect(list.body.apiKeys.map((k: { id: string }) => k.id)).toContain(created.body.id)
    const deleted = await t.call("DELETE", `/apiKeys/${created.body.id}`, { key: BOOTSTRAP_KEY })
    expect(deleted.body).toEqual({ id: created.body.id, deleted: true })
    expect((await t.call("GET", "/whoami", { key: created.body.secretKey })).status).toBe(401)
  })

  it("signs in with the deprecated token endpoint, marks it deprecated and revokes everywhere", async () => {
    const token = await signIn()
    expect(token.status).toBe(200)
    expect(token.headers.get("deprecation")).toBe("true")
    expect(token.body).toMatchObject({ tokenType: "bearer", scope: "user", expiresIn: 86400 })
    expect(token.body.token).toBe(token.body.accessToken)
    expect(token.body.accessToken).toMatch(/^u_at_/)
    expect(token.body.refreshToken).toMatch(/^u_rt_/)
    expect((await t.call("GET", "/whoami", { key: token.body.accessToken })).status).toBe(200)
    const revoked = await t.call("POST", "/auth/token/revoke", { body: { token: token.body.accessToken } })
    expect(revoked.body).toEqual({ revoked: true })
    expect((await t.call("GET", "/whoami", { key: token.body.accessToken })).status).toBe(401)
  })

  it("refreshes a token and retires the old pair", async () => {
    const token = await signIn()
    const refreshed = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": BOOTSTRAP_KEY },
      body: { grantType: "refresh_token", refreshToken: token.body.refreshToken }
    })
    expect(refreshed.status).toBe(200)
    expect((await t.call("GET", "/whoami", { key: refreshed.body.accessToken })).status).toBe(200)
    expect((await t.call("GET", "/whoami", { key: token.body.accessToken })).status).toBe(401)
  })

  it("refuses a refresh token under another organisation's application key, and leaves it unspent", async () => {
    const other = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: "Refresh elsewhere", owner: { emailAddress: "refresh@other.example", fullName: "R", password: "other owner password" } }
    })
    const token = await signIn()
    const elsewhere = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": other.body.apiKey.secretKey },
      body: { grantType: "refresh_token", refreshToken: token.body.refreshToken }
    })
    expect(elsewhere.status).toBe(401)
    expect((await t.call("GET", "/whoami", { key: token.body.accessToken })).status).toBe(200)
    const here = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": BOOTSTRAP_KEY },
      body: { grantType: "refresh_token", refreshToken: token.body.refreshToken }
    })
    expect(here.status).toBe(200)
  })

  it("refuses a wrong password, an unknown user and a missing x-app-key with 401", async () => {
    expect((await signIn("wrong password")).status).toBe(401)
    const unknown = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": BOOTSTRAP_KEY },
      body: { username: "nobody@example.com", password: "whatever" }
    })
    expect(unknown.status).toBe(401)
    const noApp = await t.call("POST", "/auth/token", { body: { username: ADMIN_EMAIL, password: ADMIN_PASSWORD } })
    expect(noApp.status).toBe(401)
    expect(noApp.body.error.message).toMatch(/x-app-key/)
  })

  it("creates an isolated organisation whose key sees none of ours", async () => {
    const created = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: "Tenant B", owner: { emailAddress: "b@example.com", fullName: "B Owner", password: "tenant b password" } }
    })
    expect(created.status).toBe(200)
    expect(created.body.organisation.id).toMatch(/^org_/)
    expect(created.body.apiKey.secretKey).toMatch(/^a_sk_/)
    const key = created.body.apiKey.secretKey
    expect((await t.call("GET", `/spaces/${spaceId}`, { key })).status).toBe(404)
    expect((await t.call("GET", "/spaces", { key })).body.count).toBe(0)
    // Its owner can sign in through its own application key.
    const token = await t.call("POST", "/auth/token", {
      headers: { "x-app-key": key },
      body: { username: "b@example.com", password: "tenant b password" }
    })
    expect(token.status).toBe(200)
    // A second organisation with the same owner e-mail is a conflict.
    const again = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: "Tenant B2", owner: { emailAddress: "b@example.com", fullName: "B", password: "tenant b password" } }
    })
    expect(again.status).toBe(409)
  })
})
