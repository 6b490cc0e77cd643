import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { type Browser, chromium } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ROOT, type ServerProcess, startServerProcess } from "../support/process.ts"

/** Debian's chromium (`.ci/run` installs it); CHROMIUM_PATH for another. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
/** Screenshots for a person to look at; `.gitignore` keeps the folder out of the repository. */
export const OUTPUT = join(ROOT, "test-output")

describe("/docs in a real Chromium, with no network beyond the server", () => {
  let server: ServerProcess
  let browser: Browser
  beforeAll(async () => {
    mkdirSync(OUTPUT, { recursive: true })
    server = await startServerProcess({ DATABASE_URL: "memory://" })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] })
  }, 120_000)
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  it("renders the API reference from Voltaic's own files, listing every operation", async () => {
    const origin = `http://127.0.0.1:${server.port}`
    const document = await fetch(`${origin}/v1/openapi.json`).then((r) => r.json() as Promise<{ paths: Record<string, Record<string, { summary?: string }>> }>)
    const summaries = Object.values(document.paths).flatMap((methods) => Object.values(methods).flatMap((op) => (op.summary === undefined ? [] : [op.summary])))
    expect(summaries.length).toBeGreaterThan(50)

    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } })
    // Anything not from the server is refused, and noted: the page must not need it.
    const elsewhere: Array<string> = []
    await context.route("**/*", (route) => {
      const url = new URL(route.request().url())
      if (url.origin === origin) return route.continue()
      elsewhere.push(url.href)
      return route.abort()
    })
    const page = await context.newPage()
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(error.message))
    await page.goto(`${origin}/docs`)
    // The reference draws its operations once it has fetched and read the document.
    await page.getByText(summaries[0], { exact: true }).first().waitFor({ state: "attached", timeout: 60_000 })
    const text = await page.evaluate(() => globalThis.document.body.innerText)
    const missing = summaries.filter((s) => !text.includes(s))
    await page.screenshot({ path: join(OUTPUT, "docs.png") })
    expect(missing).toEqual([])
    expect(elsewhere).toEqual([])
    expect(errors).toEqual([])
    await context.close()
  }, 120_000)
})
