import { PGlite } from "@electric-sql/pglite"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { newId } from "../../src/domain/ids.ts"
import { keepWasmWrappersGeneric } from "../../src/store/embedded.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { startServerProcess } from "../support/process.ts"
import { type ConsoleHarness, screenshot, serverEnv, signIn, startConsoleHarness } from "./harness.ts"

const DEVICES = 10_000
/** The bound on the first load's JavaScript, gzipped. */
const FIRST_LOAD_LIMIT_KB = 300

describe("the operator console with 10,000 devices", () => {
  let h: ConsoleHarness
  let dataDir: string
  beforeAll(async () => {
    // The fleet is written straight into the store between two starts: through REST, each new
    // device also reseeds its space's live counts, and 10,000 of them take minutes on two cores.
    dataDir = mkdtempSync(join(tmpdir(), "voltaic-console-scale-"))
    const first = await startServerProcess(serverEnv({ DATA_DIR: dataDir }))
    const origin = `http://127.0.0.1:${first.port}`
    const call = async <T,>(method: string, path: string, body?: unknown) =>
      (await fetch(`${origin}/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${BOOTSTRAP_KEY}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body)
      })).json() as Promise<T>
    const space = await call<{ id: string }>("POST", "/spaces", { name: "Large site" })
    const me = await call<{ organisation: { id: string } }>("GET", "/whoami")
    expect(await first.stop()).toBe(0)

    const started = performance.now()
    keepWasmWrappersGeneric() // as the server does before its PGlite starts
    const db = await PGlite.create({ dataDir })
    const now = Date.now()
    const ids = Array.from({ length: DEVICES }, (_, n) => newId("dev", now + n))
    await db.query(
      `INSERT INTO devices (id, organisation_id, space_id, secret_hash, name, custom_id, created_at, updated_at)
       SELECT id, $1, $2, 'not-a-key-' || id, 'Sensor ' || lpad(n::text, 5, '0'), 'sensor-' || n, $3::bigint + n, $3::bigint + n
       FROM unnest($4::text[]) WITH ORDINALITY AS t(id, k), LATERAL (SELECT (k - 1)::int AS n) AS i`,
      [me.organisation.id, space.id, now, ids]
    )
    const count = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM devices WHERE space_id = $1", [space.id])
    expect(count.rows[0].n).toBe(DEVICES)
    await db.close()
    console.log(`console scale: ${DEVICES} devices written to the store in ${((performance.now() - started) / 1000).toFixed(1)} s`)
    h = await startConsoleHarness({ DATA_DIR: dataDir })
  }, 300_000)
  afterAll(async () => {
    await h?.close()
    rmSync(dataDir, { recursive: true, force: true })
  })

  it("loads under 300 KB of gzipped JavaScript and scrolls the whole fleet with a bounded DOM", async () => {
    const { page, errors, elsewhere } = await h.page()
    const deviceRequests: Array<string> = []
    page.on("request", (request) => {
      if (new URL(request.url()).pathname === "/v1/devices") deviceRequests.push(request.url())
    })
    await signIn(page, h.origin, { key: BOOTSTRAP_KEY })
    await page.getByTestId("device-count").filter({ hasText: `${DEVICES} devices` }).waitFor()
    await page.locator(".device-row").first().waitFor()

    // What the browser fetched as JavaScript to show the fleet, as sent (gzipped).
    const scripts = await page.evaluate(() =>
      performance.getEntriesByType("resource")
        .filter((entry): entry is PerformanceResourceTiming => entry instanceof PerformanceResourceTiming && entry.name.endsWith(".js"))
        .map((entry) => ({ name: new URL(entry.name).pathname, encoded: entry.encodedBodySize, decoded: entry.decodedBodySize }))
    )
    const gzippedKb = scripts.reduce((sum, s) => sum + s.encoded, 0) / 1024
    const rawKb = scripts.reduce((sum, s) => sum + s.decoded, 0) / 1024
    expect(scripts.length).toBeGreaterThan(0)
    // Sent compressed: the encoded size is well under the decoded one.
    expect(gzippedKb).toBeLessThan(rawKb * 0.6)
    expect(gzippedKb).toBeLessThan(FIRST_LOAD_LIMIT_KB)

    // Scroll from top to bottom in frames of 1,000 px, as a fast wheel would, noting each frame's time
    // and the rows in the DOM.
    const scroll = await page.getByTestId("device-scroller").evaluate(async (element: HTMLElement) => {
      const frames: Array<number> = []
      let most = 0
      let last = performance.now()
      while (element.scrollTop + element.clientHeight < element.scrollHeight - 1) {
        element.scrollTop += 1000
        await new Promise((resolve) => requestAnimationFrame(resolve))
        const now = performance.now()
        frames.push(now - last)
        last = now
        most = Math.max(most, element.querySelectorAll(".vrow").length)
      }
      frames.sort((a, b) => a - b)
      return {
        frames: frames.length,
        p50: frames[Math.floor(frames.length * 0.5)],
        p95: frames[Math.floor(frames.length * 0.95)],
        max: frames[frames.length - 1],
        mostRows: most
      }
    })
    // At the bottom, the last device is there once its page arrived.
    const lastRow = page.locator(`.vrow[data-index="${DEVICES - 1}"] .device-row`)
    const reachedBottom = performance.now()
    await lastRow.waitFor()
    const lastPageMs = performance.now() - reachedBottom
    expect(await lastRow.locator("span").first().textContent()).toBe("Sensor 00000")
    await screenshot(page, "console-fleet-10000")

    console.log(
      `console first load: ${gzippedKb.toFixed(1)} KB of JavaScript gzipped (${rawKb.toFixed(1)} KB unpacked) in ${scripts.length} files: ` +
        scripts.map((s) => `${s.name} ${(s.encoded / 1024).toFixed(1)} KB`).join(", ")
    )
    console.log(
      `console scroll over ${DEVICES} devices: ${scroll.frames} frames of 1,000 px, frame time p50 ${scroll.p50.toFixed(1)} ms, ` +
        `p95 ${scroll.p95.toFixed(1)} ms, max ${scroll.max.toFixed(1)} ms; at most ${scroll.mostRows} rows in the DOM; ` +
        `${deviceRequests.length} page requests; last page shown ${lastPageMs.toFixed(0)} ms after reaching the bottom`
    )
    // Virtualised: the DOM holds the rows in view and a margin, never the fleet; pages, never everything.
    expect(scroll.mostRows).toBeLessThan(100)
    expect(deviceRequests.length).toBeLessThanOrEqual(Math.ceil(DEVICES / 200) + 1)
    expect(errors).toEqual([])
    expect(elsewhere).toEqual([])
  }, 300_000)
})
