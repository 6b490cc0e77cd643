import { ConfigProvider, Effect, Exit, Layer, Logger, Scope } from "effect"
import type { OpenAPIHono } from "@hono/zod-openapi"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { CoreLive } from "../../src/app.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"

/**
 * Issue requirement: bad input "gets the protocol's error, is logged once, stores nothing".
 * Every refused request (4xx), whoever answers it, is logged as exactly one warning naming
 * method, path, peer, status, code and message; never the credential or the body. Successes
 * are not logged.
 */

interface LogLine {
  readonly level: string
  readonly message: string
}

const PEER = "203.0.113.9"
/** What `@hono/node-server` hands each request as `c.env`. */
const NODE_ENV = { incoming: { socket: { remoteAddress: PEER } } }

describe("refusal log", () => {
  const logs: Array<LogLine> = []
  let app: OpenAPIHono
  let scope: Scope.Closeable

  beforeAll(async () => {
    scope = await Effect.runPromise(Scope.make())
    const provider = ConfigProvider.fromEnvRecord({
      DATABASE_URL: "memory://",
      BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
      ADMIN_EMAIL,
      ADMIN_PASSWORD,
      LOG_LEVEL: "info"
    })
    const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
      const parts = Array.isArray(message) ? message : [message]
      logs.push({ level: logLevel, message: parts.map(String).join(" ") })
    })
    const layer = CoreLive.pipe(Layer.provide(ConfigProvider.layer(provider)), Layer.provideMerge(Logger.layer([capture])))
    const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
    app = await Effect.runPromise(Effect.provideContext(makeHttpApp, context))
  })
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  beforeEach(() => {
    logs.length = 0
  })

  const request = (method: string, path: string, init: { headers?: Record<string, string>; body?: BodyInit } = {}) =>
    app.request(path, { method, headers: init.headers, body: init.body, ...(init.body instanceof ReadableStream ? { duplex: "half" } : {}) }, NODE_ENV)
  const withKey = (headers: Record<string, string> = {}) => ({ authorization: `Bearer ${BOOTSTRAP_KEY}`, ...headers })
  const httpLines = () => logs.filter((line) => line.message.startsWith("http "))

  /** Asserts the request was answered `status` and logged as exactly the one line `line`, at info (a client's refusal is no fault here). */
  const expectOneRefusal = async (res: Response, status: number, line: string) => {
    expect(res.status).toBe(status)
    expect(httpLines()).toEqual([{ level: "Info", message: line }])
  }

  it("logs a missing credential once (401), with the peer address", async () => {
    const res = await request("GET", "/v1/devices")
    await expectOneRefusal(res, 401, `http GET /v1/devices from ${PEER} refused 401 unauthorized: not authenticated: send Authorization: Bearer <key>`)
  })

  it("logs an unknown credential without the credential, from the header or the query string", async () => {
    const secret = "a_sk_not_a_real_key_000000000000"
    const viaHeader = await request("GET", "/v1/devices", { headers: { authorization: `Bearer ${secret}` } })
    const viaQuery = await request("GET", `/v1/devices?access_token=${secret}`)
    expect([viaHeader.status, viaQuery.status]).toEqual([401, 401])
    const lines = httpLines()
    expect(lines).toHaveLength(2)
    for (const line of lines) {
      expect(line.message).toBe(`http GET /v1/devices from ${PEER} refused 401 unauthorized: not authenticated: the credential is unknown, expired or revoked`)
      expect(line.message).not.toContain(secret)
    }
  })

  it("logs malformed JSON once (400), without the body", async () => {
    const body = "{\"name\": \"secret-ish body text\", "
    const res = await request("POST", "/v1/spaces", { headers: withKey({ "content-type": "application/json" }), body })
    expect(res.status).toBe(400)
    const [line, ...rest] = httpLines()
    expect(rest).toEqual([])
    expect(line.level).toBe("Info")
    expect(line.message).toMatch(new RegExp(`^http POST /v1/spaces from ${PEER.replace(/\./g, "\\.")} refused 400 invalid_request: body: must be valid JSON`))
    expect(line.message).not.toContain("secret-ish")
  })

  it("logs a field that fails validation with the message the client gets", async () => {
    const res = await request("POST", "/v1/spaces", { headers: withKey({ "content-type": "application/json" }), body: "{}" })
    await expectOneRefusal(res, 400, `http POST /v1/spaces from ${PEER} refused 400 invalid_request: name: is required`)
  })

  it("logs an unknown route once (404)", async () => {
    const res = await request("GET", "/v1/no-such-thing", { headers: withKey() })
    await expectOneRefusal(res, 404, `http GET /v1/no-such-thing from ${PEER} refused 404 not_found: no route for GET /v1/no-such-thing`)
  })

  it("logs an unknown id once (404)", async () => {
    const res = await request("GET", "/v1/devices/dev_nothere", { headers: withKey() })
    await expectOneRefusal(res, 404, `http GET /v1/devices/dev_nothere from ${PEER} refused 404 not_found: device dev_nothere not found`)
  })

  it("logs a wrong method once, as the 405 it becomes (not also as the 404 before it)", async () => {
    const res = await request("PATCH", "/v1/spaces", { headers: withKey() })
    expect(res.headers.get("allow")).toContain("GET")
    const [line, ...rest] = httpLines()
    expect(rest).toEqual([])
    expect(line.message).toMatch(new RegExp(`^http PATCH /v1/spaces from ${PEER.replace(/\./g, "\\.")} refused 405 method_not_allowed: PATCH is not allowed on /v1/spaces; use `))
    expect(res.status).toBe(405)
  })

  it("logs a body over a route's limit once (413)", async () => {
    const body = JSON.stringify({ name: "x", avatar: { url: "x".repeat(2 * 1024 * 1024) } })
    const res = await request("POST", "/v1/spaces", { headers: withKey({ "content-type": "application/json" }), body })
    await expectOneRefusal(res, 413, `http POST /v1/spaces from ${PEER} refused 413 payload_too_large: body: larger than 1048576 bytes`)
  })

  it("logs the 413 the body limit answers for a declared length over 16 MiB, before any route runs", async () => {
    const res = await request("POST", "/v1/spaces", {
      headers: withKey({ "content-type": "application/json", "content-length": String(16 * 1024 * 1024 + 1) }),
      body: "{}"
    })
    await expectOneRefusal(res, 413, `http POST /v1/spaces from ${PEER} refused 413 payload_too_large: body: larger than 16777216 bytes`)
  })

  it("answers and logs 413 once for a streamed body over 16 MiB", async () => {
    const chunk = new Uint8Array(1024 * 1024).fill(0x20)
    let sent = 0
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 17) controller.enqueue(chunk)
        else controller.close()
      }
    })
    const res = await request("POST", "/v1/spaces", { headers: withKey({ "content-type": "application/json" }), body })
    expect(await res.json()).toMatchObject({ error: { status: 413, code: "payload_too_large" } })
    expect(res.headers.get("connection")).toBe("close")
    await expectOneRefusal(res, 413, `http POST /v1/spaces from ${PEER} refused 413 payload_too_large: body: larger than 16777216 bytes`)
  })

  it("logs an unsupported content type once (415)", async () => {
    const res = await request("POST", "/v1/spaces", { headers: withKey({ "content-type": "application/xml" }), body: "<space/>" })
    await expectOneRefusal(
      res,
      415,
      `http POST /v1/spaces from ${PEER} refused 415 unsupported_media_type: Content-Type application/xml is not supported; send application/json`
    )
  })

  it("logs a refusal a handler answers itself (an OAuth error body) once", async () => {
    const res = await request("POST", "/v1/oauth/token", {
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=password"
    })
    await expectOneRefusal(res, 400, `http POST /v1/oauth/token from ${PEER} refused 400 unsupported_grant_type: grant_type must be client_credentials`)
  })

  it("escapes control characters a decoded path carries: one line per refusal, never two", async () => {
    // %E2%80%A8 and %E2%80%A9: U+2028 and U+2029, line ends to Node's readline.
    const res = await request("GET", "/v1/no%0Asuch%0D%0Ahttp GET /v1/x refused%E2%80%A8a%E2%80%A9b", { headers: withKey() })
    expect(res.status).toBe(404)
    const [line, ...rest] = httpLines()
    expect(rest).toEqual([])
    expect(line.message).not.toMatch(/[\r\n\u2028\u2029]/)
    expect(line.message).toContain("/v1/no\\u000asuch\\u000d\\u000ahttp GET /v1/x refused\\u2028a\\u2029b")
  })

  it("logs a 404 outside the API (a browser's favicon) at debug only", async () => {
    const res = await request("GET", "/favicon.ico")
    expect(res.status).toBe(404)
    // Not at info, where the default level shows it; an unknown route under /v1 is (above).
    expect(httpLines()).toEqual([])
  })

  it("does not log successes", async () => {
    const list = await request("GET", "/v1/devices", { headers: withKey() })
    const created = await request("POST", "/v1/spaces", { headers: withKey({ "content-type": "application/json" }), body: "{\"name\":\"Home\"}" })
    const health = await request("GET", "/health")
    expect([list.status, created.status, health.status]).toEqual([200, 200, 200])
    expect(httpLines()).toEqual([])
  })

  it("names no peer where the runtime gives none", async () => {
    const res = await app.request("/v1/devices", { method: "GET" })
    expect(res.status).toBe(401)
    expect(httpLines()).toEqual([{ level: "Info", message: "http GET /v1/devices refused 401 unauthorized: not authenticated: send Authorization: Bearer <key>" }])
  })
})
