import { gunzipSync } from "node:zlib"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startAppOn, type TestApp } from "../support/app.ts"

/** The built console (Vitest's global setup builds it into dist/console) as the Hono app serves it. */
describe("the console's files, served by the HTTP app", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await startAppOn("pglite")
  })
  afterAll(() => t.close())

  it("answers / and a browser's client-side routes with index.html, never cached", async () => {
    for (const path of ["/", "/devices/dev_unknown", "/energy"]) {
      const page = await t.app.request(path, { headers: { accept: "text/html,application/xhtml+xml" } })
      expect(page.status).toBe(200)
      expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8")
      expect(page.headers.get("cache-control")).toBe("no-cache")
      expect(await page.text()).toContain('<div id="app">')
    }
  })

  it("leaves the server's own paths and requests not asking for HTML alone", async () => {
    for (const path of ["/v1/nothing-here", "/docs/nothing", "/health/x", "/metrics/x", "/assets/nothing.js"]) {
      const answer = await t.app.request(path, { headers: { accept: "text/html" } })
      expect(answer.status, path).toBe(404)
      expect(((await answer.json()) as { error: { code: string } }).error.code).toBe("not_found")
    }
    expect((await t.app.request("/devices/dev_unknown")).status).toBe(404)
    expect((await t.app.request("/devices/dev_unknown", { method: "POST", headers: { accept: "text/html" } })).status).toBe(404)
    // Still the API's answers where the API is.
    expect((await t.app.request("/health")).status).toBe(200)
  })

  it("sends hashed assets for a year, gzipped when accepted", async () => {
    const index = await (await t.app.request("/")).text()
    const script = /src="(\/assets\/[^"]+\.js)"/.exec(index)?.[1]
    expect(script).toBeDefined()
    const plain = await t.app.request(script ?? "")
    expect(plain.status).toBe(200)
    expect(plain.headers.get("content-type")).toBe("text/javascript; charset=utf-8")
    expect(plain.headers.get("cache-control")).toBe("public, max-age=31536000, immutable")
    expect(plain.headers.get("content-encoding")).toBeNull()
    const source = Buffer.from(await plain.arrayBuffer())
    const gzipped = await t.app.request(script ?? "", { headers: { "accept-encoding": "gzip, br" } })
    expect(gzipped.headers.get("content-encoding")).toBe("gzip")
    expect(gzipped.headers.get("vary")).toBe("accept-encoding")
    const packed = Buffer.from(await gzipped.arrayBuffer())
    expect(packed.length).toBeLessThan(source.length)
    expect(gunzipSync(packed).equals(source)).toBe(true)
  })
})
