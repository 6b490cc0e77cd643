import { Context, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hashSecret } from "../../src/auth/secrets.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startAppOn, type TestApp } from "../support/app.ts"
import { STORE_KINDS } from "../support/databases.ts"

const signIn = (t: TestApp, username: string, password: string, appKey = BOOTSTRAP_KEY) =>
  t.call("POST", "/auth/token", { headers: { "x-app-key": appKey }, body: { username, password } })

const managementToken = async (t: TestApp, key = BOOTSTRAP_KEY) => {
  const client = await t.call("POST", "/managementClients", { key, body: { name: "directory sync" } })
  const token = await t.call("POST", "/oauth/token", {
    body: new URLSearchParams({ grant_type: "client_credentials", client_id: client.body.clientId, client_secret: client.body.clientSecret }).toString(),
    headers: { "content-type": "application/x-www-form-urlencoded" }
  })
  return { client: client.body, token: token.body.access_token as string }
}

describe.each(STORE_KINDS)("user management on %s", (kind) => {
  let t: TestApp
  let admin: string
  const as = (key: string) => (method: string, path: string, body?: unknown) => t.call(method, path, { key, body })
  beforeAll(async () => {
    t = await startAppOn(kind)
    admin = (await signIn(t, ADMIN_EMAIL, ADMIN_PASSWORD)).body.accessToken
  })
  afterAll(() => t.close())

  it("issues management tokens for client credentials in the body or as HTTP Basic", async () => {
    const client = await t.call("POST", "/managementClients", { key: admin, body: { name: "hr" } })
    expect(client.status).toBe(200)
    expect(client.body.clientSecret).toMatch(/^m_cs_/)
    const listed = await t.call("GET", "/managementClients", { key: admin })
    expect(JSON.stringify(listed.body)).not.toContain(client.body.clientSecret)
    const viaBody = await t.call("POST", "/oauth/token", {
      body: { grant_type: "client_credentials", client_id: client.body.clientId, client_secret: client.body.clientSecret }
    })
    expect(viaBody.status).toBe(200)
    expect(viaBody.body).toMatchObject({ token_type: "bearer", expires_in: 3600 })
    const basic = Buffer.from(`${client.body.clientId}:${client.body.clientSecret}`).toString("base64")
    const viaBasic = await t.call("POST", "/oauth/token", {
      body: "grant_type=client_credentials",
      headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded" }
    })
    expect(viaBasic.status).toBe(200)
    expect((await as(viaBasic.body.access_token)("GET", "/teams/")).status).toBe(200)
    expect((await as(viaBasic.body.access_token)("GET", "/devices")).status).toBe(403)

    const wrong = await t.call("POST", "/oauth/token", { body: { grant_type: "client_credentials", client_id: client.body.clientId, client_secret: "m_cs_wrong" } })
    expect(wrong.status).toBe(401)
    expect(wrong.body).toMatchObject({ error: "invalid_client" })
    const grant = await t.call("POST", "/oauth/token", { body: { grant_type: "password" } })
    expect(grant.body).toMatchObject({ error: "unsupported_grant_type" })

    expect((await t.call("DELETE", `/managementClients/${client.body.id}`, { key: admin })).status).toBe(200)
    expect((await as(viaBody.body.access_token)("GET", "/teams/")).status).toBe(401)
  })

  it("creates, reads, promotes and removes organisation users", async () => {
    const call = as(admin)
    const created = await call("POST", "/organisations/users/", {
      emailAddress: "grace@example.com",
      fullName: "Grace Brewster Hopper",
      password: "cobol forever",
      loginViaSsoOnly: false
    })
    expect(created.status).toBe(200)
    expect(created.body).toMatchObject({
      firstName: "Grace",
      lastName: "Brewster Hopper",
      fullName: "Grace Brewster Hopper",
      emailAddress: "grace@example.com",
      isAdmin: false,
      teams: []
    })
    expect(created.body.id).toMatch(/^ou_/)
    expect(created.body.userId).toMatch(/^usr_/)
    expect((await call("POST", "/organisations/users/", { emailAddress: "grace@example.com", fullName: "G" })).status).toBe(409)
    const bad = await call("POST", "/organisations/users/", { emailAddress: "not-an-address", fullName: "X" })
    expect(bad.status).toBe(400)
    expect(bad.body.error.field).toBe("emailAddress")

    const token = await signIn(t, "grace@example.com", "cobol forever")
    expect(token.status).toBe(200)

    const list = await call("GET", "/organisations/users?limit=10&sort=ASC&order=emailAddress")
    expect(list.body.map((u: { emailAddress: string }) => u.emailAddress)).toEqual(["grace@example.com", ADMIN_EMAIL])
    expect(list.headers.get("x-total-count")).toBe("2")
    expect((await call("GET", "/organisations/users?order=password")).status).toBe(400)

    const promoted = await call("PUT", `/organisations/users/${created.body.id}`, { isAdmin: true })
    expect(promoted.body.isAdmin).toBe(true)
    const demoted = await call("PUT", `/organisations/users/${created.body.id}`, { isAdmin: false })
    expect(demoted.body.isAdmin).toBe(false)

    const removed = await call("DELETE", `/organisations/users/${created.body.id}`)
    expect(removed.body).toEqual({ removed: true })
    expect((await as(token.body.accessToken)("GET", "/whoami")).status).toBe(401)
    expect((await call("GET", `/organisations/${created.body.id}`)).status).toBe(404)
    expect((await signIn(t, "grace@example.com", "cobol forever")).status).toBe(401)
  })

  it("never demotes or removes the last admin", async () => {
    const me = (await as(admin)("GET", "/whoami")).body.user.organisationUserId
    const demote = await as(admin)("PUT", `/organisations/users/${me}`, { isAdmin: false })
    expect(demote.status).toBe(409)
    const remove = await as(admin)("DELETE", `/organisations/users/${me}`)
    expect(remove.status).toBe(409)
    expect((await as(admin)("GET", `/organisations/${me}`)).body.isAdmin).toBe(true)
  })

  it("manages teams and their members", async () => {
    const call = as(admin)
    const org = (await call("GET", "/whoami")).body.organisation.id
    const user = (await call("POST", "/organisations/users/", { emailAddress: "linus@example.com", fullName: "Linus T" })).body
    const team = await call("POST", "/teams/", { organisationId: org, name: "Operators" })
    expect(team.status).toBe(200)
    expect(team.body).toMatchObject({ name: "Operators", isAdmin: false, members: [] })
    expect(team.body.id).toMatch(/^tem_/)
    expect((await call("POST", "/teams/", { organisationId: "org_other", name: "X" })).status).toBe(404)

    const added = await call("POST", `/teams/${team.body.id}/members`, { organisationUserId: user.id })
    expect(added.body.members).toEqual([expect.objectContaining({ id: user.id, name: "Linus T", emailAddress: "linus@example.com" })])
    const twice = await call("POST", `/teams/${team.body.id}/members`, { organisationUserId: user.id })
    expect(twice.body.members).toHaveLength(1)
    expect((await call("GET", `/organisations/${user.id}`)).body.teams).toEqual([{ id: team.body.id, name: "Operators", isAdmin: false }])

    const list = await call("GET", "/teams/?limit=5&page=0")
    expect(list.body.map((x: { id: string }) => x.id)).toContain(team.body.id)

    const removedByBody = await call("DELETE", `/teams/${team.body.id}/members`, { organisationUserId: user.id })
    expect(removedByBody.body).toEqual({ deleted: true })
    await call("POST", `/teams/${team.body.id}/members`, { organisationUserId: user.id })
    expect((await call("DELETE", `/teams/${team.body.id}/members/${user.id}`)).body).toEqual({ deleted: true })
    expect((await call("GET", `/teams/${team.body.id}`)).body.members).toEqual([])
    expect((await call("DELETE", `/teams/${team.body.id}/members/${user.id}`)).status).toBe(404)

    const deleted = await call("DELETE", `/teams/${team.body.id}`)
    expect(deleted.body).toMatchObject({ deleted: true })
    expect((await call("GET", `/teams/${team.body.id}`)).status).toBe(404)
  })

  it("refuses a user of another organisation as a team member or alert recipient", async () => {
    const other = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: `Other ${kind}`, owner: { emailAddress: `owner-${kind}@other.example`, fullName: "O", password: "other password" } }
    })
    const otherToken = (await signIn(t, `owner-${kind}@other.example`, "other password", other.body.apiKey.secretKey)).body.accessToken
    const stranger = (await as(otherToken)("POST", "/organisations/users/", { emailAddress: `s-${kind}@other.example`, fullName: "S" })).body
    const org = (await as(admin)("GET", "/whoami")).body.organisation.id
    const team = (await as(admin)("POST", "/teams/", { organisationId: org, name: "Mine" })).body
    expect((await as(admin)("POST", `/teams/${team.id}/members`, { organisationUserId: stranger.id })).status).toBe(404)
    const space = (await as(admin)("POST", "/spaces", { name: "Mine" })).body
    expect((await as(admin)("POST", `/spaces/${space.id}/alerts/users/${stranger.id}`)).status).toBe(404)
    expect((await as(otherToken)("GET", `/teams/${team.id}`)).status).toBe(404)
  })

  it("adds an account of another organisation as it is, and refuses to take a password for it", async () => {
    const other = await t.call("POST", "/organisations", {
      key: BOOTSTRAP_KEY,
      body: { name: `Second ${kind}`, owner: { emailAddress: `second-${kind}@other.example`, fullName: "Sam Second", password: "second password" } }
    })
    expect(other.status).toBe(200)
    const withPassword = await as(admin)("POST", "/organisations/users/", {
      emailAddress: `second-${kind}@other.example`,
      fullName: "Someone Else",
      password: "a password of mine"
    })
    expect(withPassword.status).toBe(409)
    expect(withPassword.body.error.message).toContain("add it without a password")
    const emails = ((await as(admin)("GET", "/organisations/users?limit=200")).body as Array<{ emailAddress: string }>).map((u) => u.emailAddress)
    expect(emails).not.toContain(`second-${kind}@other.example`)
    // The account's own password still signs in, and the refused one does not.
    expect((await signIn(t, `second-${kind}@other.example`, "a password of mine", other.body.apiKey.secretKey)).status).toBe(401)
    const added = await as(admin)("POST", "/organisations/users/", { emailAddress: `second-${kind}@other.example`, fullName: "Someone Else" })
    expect(added.status).toBe(200)
    expect(added.body).toMatchObject({ emailAddress: `second-${kind}@other.example`, isAdmin: false })
    expect((await signIn(t, `second-${kind}@other.example`, "second password")).status).toBe(200)
  })

  it("adds and removes a space's alert recipients and shows them on the space", async () => {
    const call = as(admin)
    const user = (await call("POST", "/organisations/users/", { emailAddress: `alice-${kind}@example.com`, fullName: "Alice A" })).body
    const space = (await call("POST", "/spaces", { name: "Boiler room", country: "IRL" })).body
    const added = await call("POST", `/spaces/${space.id}/alerts/users/${user.id}`)
    expect(added.status).toBe(200)
    expect(added.body.alertUsers).toEqual([{ id: user.id, fullName: "Alice A", emailAddress: `alice-${kind}@example.com` }])
    expect((await call("GET", `/spaces/${space.id}`)).body.alertUsers).toHaveLength(1)
    const management = await managementToken(t)
    const listed = await as(management.token)("GET", "/spaces?country=IRL")
    expect(listed.status).toBe(200)
    expect(listed.body.spaces.map((s: { id: string }) => s.id)).toContain(space.id)
    const removed = await call("DELETE", `/spaces/${space.id}/alerts/users/${user.id}`)
    expect(removed.body.alertUsers).toEqual([])
  })

  it("drops a removed user's team memberships and alert subscriptions", async () => {
    const call = as(admin)
    const org = (await call("GET", "/whoami")).body.organisation.id
    const user = (await call("POST", "/organisations/users/", { emailAddress: `bob-${kind}@example.com`, fullName: "Bob B" })).body
    const team = (await call("POST", "/teams/", { organisationId: org, name: "Night shift" })).body
    const space = (await call("POST", "/spaces", { name: "Roof" })).body
    await call("POST", `/teams/${team.id}/members`, { organisationUserId: user.id })
    await call("POST", `/spaces/${space.id}/alerts/users/${user.id}`)
    await call("DELETE", `/organisations/users/${user.id}`)
    expect((await call("GET", `/teams/${team.id}`)).body.members).toEqual([])
    expect((await call("GET", `/spaces/${space.id}`)).body.alertUsers).toEqual([])
  })

  it("refuses an expired management token", async () => {
    const { token } = await managementToken(t)
    expect(token).toMatch(/^m_at_/)
    await Effect.runPromise(Context.get(t.context, Sql).query("UPDATE management_tokens SET expires_at = 1 WHERE token_hash = $1", [hashSecret(token)]))
    // Never used, so in no cache: the store says it expired.
    expect((await as(token)("GET", "/teams/")).status).toBe(401)
  })
})
