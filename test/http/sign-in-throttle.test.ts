import { Clock, Context, Duration, Effect } from "effect"
import type { OpenAPIHono } from "@hono/zod-openapi"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { deleteExpired } from "../../src/store/signInFailures.ts"
import { Sql, type SqlClient } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY, startApp, startAppOn, type TestApp } from "../support/app.ts"
import { createPostgresDatabase, STORE_KINDS } from "../support/databases.ts"

/**
 * Issue 15, failure 6: 12 failed sign-ins for a non-existent account from one address locked the
 * owner's right password out from that address, and each process kept its own counts.
 */

const X = "198.51.100.7"
const Y = "203.0.113.20"
const WINDOW_S = 600
/** One millisecond per step: the delays are read from the recording clock, not waited for. */
const ENV = { SIGN_IN_DELAY_STEP_MS: "1", SIGN_IN_WINDOW_SECONDS: String(WINDOW_S) }
const MEMBER = { emailAddress: "member@example.com", password: "member password" }

/** The real clock, with every sleep's duration recorded. */
const recordingClock = (sleeps: Array<number>): Clock.Clock => {
  const real = Effect.runSync(Clock.clockWith(Effect.succeed))
  return {
    currentTimeMillisUnsafe: () => real.currentTimeMillisUnsafe(),
    currentTimeMillis: real.currentTimeMillis,
    currentTimeNanosUnsafe: () => real.currentTimeNanosUnsafe(),
    currentTimeNanos: real.currentTimeNanos,
    monotonicTimeNanosUnsafe: () => real.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: real.monotonicTimeNanos,
    sleep: (duration) => {
      sleeps.push(Duration.toMillis(duration))
      return real.sleep(duration)
    }
  }
}

interface Harness {
  readonly app: OpenAPIHono
  readonly sleeps: Array<number>
  readonly sql: SqlClient
}

const harness = async (t: TestApp): Promise<Harness> => {
  const sleeps: Array<number> = []
  const context = Context.add(t.context, Clock.Clock, recordingClock(sleeps))
  return { app: await Effect.runPromise(Effect.provideContext(makeHttpApp, context)), sleeps, sql: Context.get(t.context, Sql) }
}

/** `address` as `@hono/node-server` hands it over (`c.env.incoming.socket`). */
const post = async (app: OpenAPIHono, path: string, body: unknown, address: string, headers: Record<string, string> = {}) => {
  const res = await app.request(
    `/v1${path}`,
    { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) },
    { incoming: { socket: { remoteAddress: address } } }
  )
  return { status: res.status, headers: res.headers, body: await res.json() }
}

const signIn = (app: OpenAPIHono, username: string, password: string, address: string) =>
  post(app, "/auth/token", { username, password }, address, { "x-app-key": BOOTSTRAP_KEY })

const statuses = async (n: number, attempt: () => Promise<{ status: number }>) => {
  const out: Array<number> = []
  for (let i = 0; i < n; i++) out.push((await attempt()).status)
  return out
}

const rowsOf = (sql: SqlClient, account: string) =>
  Effect.runPromise(
    sql.query<{ address: string; failures: number }>(
      "SELECT address, failures FROM sign_in_failures WHERE account = $1 ORDER BY address",
      [account]
    )
  )

describe.each(STORE_KINDS)("the sign-in throttle on %s", (kind) => {
  let t: TestApp
  let h: Harness
  beforeAll(async () => {
    t = await startAppOn(kind, ENV)
    const member = await t.call("POST", "/organisations/users/", { key: BOOTSTRAP_KEY, body: { ...MEMBER, fullName: "Member" } })
    expect(member.status).toBe(200)
    h = await harness(t)
  })
  afterAll(() => t.close())
  beforeEach(async () => {
    await Effect.runPromise(h.sql.query("DELETE FROM sign_in_failures"))
    h.sleeps.length = 0
  })

  it("lets the owner's right password in from an address that flooded a non-existent account", async () => {
    const flood = await statuses(12, () => signIn(h.app, "nobody@example.com", "guess", X))
    expect(flood).toEqual([...Array(10).fill(401), 429, 429])
    const owner = await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)
    expect(owner.status).toBe(200)
    expect(owner.body.accessToken).toEqual(expect.any(String))
  })

  it("does not slow or lock another account, from the flooding address or another", async () => {
    expect((await statuses(12, () => signIn(h.app, ADMIN_EMAIL, "guess", X))).slice(-2)).toEqual([429, 429])
    h.sleeps.length = 0
    expect((await signIn(h.app, MEMBER.emailAddress, "wrong", X)).status).toBe(401)
    expect((await signIn(h.app, MEMBER.emailAddress, MEMBER.password, X)).status).toBe(200)
    expect((await signIn(h.app, MEMBER.emailAddress, MEMBER.password, Y)).status).toBe(200)
    expect(h.sleeps).toEqual([])
  })

  it("refuses an account from an address after ten failures there, with 429 and Retry-After until the window ends", async () => {
    expect(await statuses(10, () => signIn(h.app, ADMIN_EMAIL, "guess", X))).toEqual(Array(10).fill(401))
    const locked = await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)
    expect(locked.status).toBe(429)
    expect(locked.body.error).toMatchObject({ status: 429, code: "rate_limited" })
    const retryAfter = Number(locked.headers.get("retry-after"))
    expect(retryAfter).toBeGreaterThan(WINDOW_S - 60)
    expect(retryAfter).toBeLessThanOrEqual(WINDOW_S)
  })

  it("lets the right password in from another address during that lockout, slowed by the account's failures", async () => {
    await statuses(10, () => signIn(h.app, ADMIN_EMAIL, "guess", X))
    expect((await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(429)
    h.sleeps.length = 0
    // The account has 11 failures from every address: one beyond the allowance of one address.
    expect((await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, Y)).status).toBe(200)
    expect(h.sleeps).toEqual([2])
    // Its own attempt is taken back out of the account's count; the lockout from X stays.
    expect(await rowsOf(h.sql, `user:${ADMIN_EMAIL}`)).toEqual([{ address: "", failures: 11 }, { address: X, failures: 11 }])
    expect((await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(429)
  })

  it("slows each failure beyond the third from an address by one more step", async () => {
    expect(await statuses(6, () => signIn(h.app, ADMIN_EMAIL, "guess", X))).toEqual(Array(6).fill(401))
    expect(h.sleeps).toEqual([1, 2, 3])
  })

  it("does not count successful sign-ins as failures", async () => {
    await signIn(h.app, ADMIN_EMAIL, "typo", X)
    expect(await statuses(12, () => signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X))).toEqual(Array(12).fill(200))
    expect(h.sleeps).toEqual([])
    expect(await rowsOf(h.sql, `user:${ADMIN_EMAIL}`)).toEqual([{ address: "", failures: 1 }])
  })

  it("counts every one of concurrent guesses: ten are checked, the rest refused", async () => {
    const answers = await Promise.all(Array.from({ length: 20 }, () => signIn(h.app, "burst@example.com", "guess", X)))
    const counted = answers.map((a) => a.status).sort()
    expect(counted).toEqual([...Array(10).fill(401), ...Array(10).fill(429)])
  })

  it("lets a locked address in again once the window has ended, and deletes the ended rows", async () => {
    await statuses(10, () => signIn(h.app, ADMIN_EMAIL, "guess", X))
    await signIn(h.app, "gone@example.com", "guess", Y)
    expect((await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(429)
    // The window is measured from the stored first failure: moving it back ends the window.
    await Effect.runPromise(h.sql.query("UPDATE sign_in_failures SET first_failed_at = first_failed_at - $1::bigint", [WINDOW_S * 1000]))
    expect((await signIn(h.app, "gone@example.com", "guess", X)).status).toBe(401)
    // A failure after the window starts a new one; the row from Y has not been touched since.
    const fresh = [{ address: "", failures: 1 }, { address: X, failures: 1 }]
    expect(await rowsOf(h.sql, "user:gone@example.com")).toEqual([...fresh, { address: Y, failures: 1 }])
    expect(await Effect.runPromise(deleteExpired(h.sql, WINDOW_S * 1000))).toBe(3)
    expect(await rowsOf(h.sql, `user:${ADMIN_EMAIL}`)).toEqual([])
    expect(await rowsOf(h.sql, "user:gone@example.com")).toEqual(fresh)
    expect((await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(200)
  })

  it("counts a management client id as an account on POST /oauth/token", async () => {
    const client = await t.call("POST", "/managementClients", { key: BOOTSTRAP_KEY, body: { name: "directory sync" } })
    expect(client.status).toBe(200)
    const exchange = (secret: string, address: string) =>
      post(h.app, "/oauth/token", { grant_type: "client_credentials", client_id: client.body.clientId, client_secret: secret }, address)
    expect(await statuses(10, () => exchange("m_cs_wrong", X))).toEqual(Array(10).fill(401))
    const locked = await exchange(client.body.clientSecret, X)
    expect(locked.status).toBe(429)
    expect(locked.body.error).toBe("slow_down")
    expect(Number(locked.headers.get("retry-after"))).toBeGreaterThan(WINDOW_S - 60)
    expect((await exchange(client.body.clientSecret, Y)).status).toBe(200)
    // A client's failures are not a user's.
    expect((await signIn(h.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(200)
  })

  it("answers a client id with NUL or a malformed escape in HTTP Basic as a client error, not a 500", async () => {
    const basic = (credentials: string) =>
      h.app.request("/v1/oauth/token", {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Basic ${Buffer.from(credentials).toString("base64")}` },
        body: JSON.stringify({ grant_type: "client_credentials" })
      }, { incoming: { socket: { remoteAddress: X } } })
    const nul = await basic("a%00b:secret")
    expect(nul.status).toBe(400)
    expect(await nul.json()).toEqual({ error: "invalid_request", error_description: "client_id and client_secret must not contain NUL" })
    expect((await basic("a\u0000b:secret")).status).toBe(400)
    expect((await basic("bad%E0%A4%A:secret")).status).toBe(401)
  })
})

describe("two app instances on one Postgres database", () => {
  let drop: () => Promise<void>
  let a: TestApp
  let b: TestApp
  beforeAll(async () => {
    const db = await createPostgresDatabase()
    drop = db.drop
    a = await startApp({ DATABASE_URL: db.url, ...ENV })
    b = await startApp({ DATABASE_URL: db.url, ...ENV })
  })
  afterAll(async () => {
    await a.close()
    await b.close()
    await drop()
  })

  it("share the counts: failures on one lock the address out on the other", async () => {
    const [ha, hb] = [await harness(a), await harness(b)]
    expect(await statuses(5, () => signIn(ha.app, ADMIN_EMAIL, "guess", X))).toEqual(Array(5).fill(401))
    expect(await statuses(5, () => signIn(hb.app, ADMIN_EMAIL, "guess", X))).toEqual(Array(5).fill(401))
    // b's failures are the 6th to 10th from X: each is slowed by the count a left.
    expect(hb.sleeps).toEqual([3, 4, 5, 6, 7])
    expect((await signIn(ha.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(429)
    expect((await signIn(hb.app, ADMIN_EMAIL, ADMIN_PASSWORD, X)).status).toBe(429)
    expect((await signIn(hb.app, ADMIN_EMAIL, ADMIN_PASSWORD, Y)).status).toBe(200)
  })
})
