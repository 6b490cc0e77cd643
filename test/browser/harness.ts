import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"
import { ROOT, type ServerProcess, startServerProcess } from "../support/process.ts"

/** Debian's chromium (`.ci/run` installs it); CHROMIUM_PATH for another. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
/** Screenshots for a person to look at; `.gitignore` keeps the folder out of the repository. */
export const OUTPUT = join(ROOT, "test-output")

export interface ConsoleHarness {
  readonly server: ServerProcess
  readonly browser: Browser
  readonly origin: string
  /** REST under /v1 with the bootstrap application key (or `key`); throws on a status other than 200. */
  rest<T>(method: string, path: string, body?: unknown, key?: string): Promise<T>
  /** A page on the server alone: any request elsewhere is refused and recorded in `elsewhere`. */
  page(): Promise<{ page: Page; context: BrowserContext; errors: Array<string>; elsewhere: Array<string> }>
  close(): Promise<void>
}

/** The server's settings in these tests: the owner and key they sign in with. */
export const serverEnv = (store: Record<string, string>) => ({ ...store, BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY, ADMIN_EMAIL, ADMIN_PASSWORD })

/** A server on free ports (by default on a memory store) and a Chromium to look at it. */
export const startConsoleHarness = async (store: Record<string, string> = { DATABASE_URL: "memory://" }): Promise<ConsoleHarness> => {
  mkdirSync(OUTPUT, { recursive: true })
  const server = await startServerProcess(serverEnv(store))
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] })
  const origin = `http://127.0.0.1:${server.port}`
  const contexts: Array<BrowserContext> = []
  return {
    server,
    browser,
    origin,
    rest: async <T,>(method: string, path: string, body?: unknown, key = BOOTSTRAP_KEY) => {
      const response = await fetch(`${origin}/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body)
      })
      const text = await response.text()
      if (response.status !== 200) throw new Error(`${method} ${path} answered ${response.status}: ${text}`)
      return JSON.parse(text) as T
    },
    page: async () => {
      const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, timezoneId: "UTC", acceptDownloads: true })
      contexts.push(context)
      await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin })
      const elsewhere: Array<string> = []
      await context.route("**/*", (route) => {
        const url = new URL(route.request().url())
        if (url.origin === origin || url.protocol === "data:" || url.protocol === "blob:") return route.continue()
        elsewhere.push(url.href)
        return route.abort()
      })
      const page = await context.newPage()
      const errors: Array<string> = []
      page.on("pageerror", (error) => errors.push(error.message))
      return { page, context, errors, elsewhere }
    },
    close: async () => {
      for (const context of contexts) await context.close().catch(() => undefined)
      await browser.close()
      await server.stop()
    }
  }
}

/** Signs in through the form: the owner's e-mail and password, or an application key. */
export const signIn = async (page: Page, origin: string, how: { key: string } | { email: string; password: string } = { email: ADMIN_EMAIL, password: ADMIN_PASSWORD }) => {
  await page.goto(origin)
  if ("key" in how) {
    await page.getByRole("button", { name: "Application key" }).click()
    await page.locator("input[name=key]").fill(how.key)
  } else {
    await page.locator("input[name=email]").fill(how.email)
    await page.locator("input[name=password]").fill(how.password)
  }
  await page.locator("form.signin button[type=submit]").click()
  await page.getByTestId("who").waitFor()
}

export const screenshot = (page: Page, name: string) => page.screenshot({ path: join(OUTPUT, `${name}.png`), fullPage: true })
