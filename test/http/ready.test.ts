import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startApp, type TestApp } from "../support/app.ts"
import { type PrivateNats, startPrivateNats } from "../support/nats.ts"

const until = async (what: string, check: () => Promise<boolean>) => {
  for (let i = 0; i < 400; i++) {
    if (await check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

describe("/ready while the bus is lost", () => {
  let nats: PrivateNats
  let t: TestApp
  beforeAll(async () => {
    nats = await startPrivateNats()
    t = await startApp({ DATABASE_URL: "memory://", NATS_URL: nats.url })
  })
  afterAll(async () => {
    await t?.close()
    await nats?.kill()
  })

  it("answers 503 naming the bus until NATS is back, while /health keeps answering 200", async () => {
    expect((await t.app.request("/ready")).status).toBe(200)
    await nats.kill()
    await until("/ready to answer 503", async () => (await t.app.request("/ready")).status === 503)
    const res = await t.app.request("/v1/ready")
    expect(res.status).toBe(503)
    expect(res.headers.get("retry-after")).toBe("1")
    expect(await res.json()).toEqual({ error: { status: 503, code: "unavailable", message: "the bus (NATS) is not reachable" } })
    expect((await t.app.request("/health")).status).toBe(200)
    await nats.restart()
    await until("/ready to answer 200 again", async () => (await t.app.request("/ready")).status === 200)
  })
})
