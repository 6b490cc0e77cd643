import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type StoreKind, type TestDatabase } from "../support/databases.ts"
import { runCli, startServerProcess } from "../support/process.ts"

let dataDir: string
const databases: Array<TestDatabase> = []
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "voltaic-cli-"))
})
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true })
  for (const db of databases) await db.drop()
})

const storeEnv = async (kind: StoreKind, name: string): Promise<Record<string, string>> => {
  if (kind === "pglite") return { DATA_DIR: join(dataDir, name) }
  const db = await createPostgresDatabase()
  databases.push(db)
  // With NATS, as a cluster runs: reset-password tells running servers over it.
  return { DATABASE_URL: db.url, NATS_URL: process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222" }
}

const printed = (output: string, label: string): string => {
  const value = new RegExp(`${label}:\\s+(\\S+)`).exec(output)?.[1]
  if (value === undefined) throw new Error(`no "${label}" in:\n${output}`)
  return value
}

const stderrLines = (stderr: string) => stderr.trim().split("\n").filter((l) => !/^npm warn/.test(l))

/** `POST /v1/auth/token` with the password grant. */
const signIn = (port: number, appKey: string, username: string, password: string) =>
  fetch(`http://127.0.0.1:${port}/v1/auth/token`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-app-key": appKey },
    body: JSON.stringify({ username, password })
  })

const whoami = (port: number, secret: string) =>
  fetch(`http://127.0.0.1:${port}/v1/whoami`, { headers: { authorization: `Bearer ${secret}` } }).then((r) => r.status)

describe.each(["pglite", "postgres"] as const)("recovering lost first-start secrets on %s", (kind) => {
  it("sets a new owner password and creates an application key from the command line", async () => {
    const env = await storeEnv(kind, "lost")
    const first = await startServerProcess(env)
    let oldToken: string
    try {
      // The secrets a careless operator is about to lose, and a token signed in with them.
      const email = printed(first.output(), "admin e-mail")
      const password = printed(first.output(), "admin password")
      const key = printed(first.output(), "application key")
      const signedIn = await signIn(first.port, key, email, password)
      expect(signedIn.status).toBe(200)
      oldToken = (await signedIn.json()).accessToken
      expect(await whoami(first.port, oldToken)).toBe(200)
      if (kind === "pglite") {
        // The running server holds DATA_DIR: the tool says so in one line.
        const refused = await runCli(["admin", "reset-password"], env)
        expect(refused.code).not.toBe(0)
        expect(stderrLines(refused.stderr)).toEqual([
          expect.stringMatching(new RegExp(`^voltaic: DATA_DIR: .* is in use by process ${first.child.pid} \\(voltaic server\\)`))
        ])
      }
    } finally {
      expect(await first.stop()).toBe(0)
    }

    const reset = await runCli(["admin", "reset-password"], env)
    expect(reset.stderr).toBe("")
    expect(reset.code).toBe(0)
    expect(reset.stdout).toContain("1 sign-in token revoked")
    const newPassword = printed(reset.stdout, "admin password")
    const email = printed(reset.stdout, "admin e-mail")
    expect(email).toBe("admin@voltaic.local")

    const created = await runCli(["keys", "create", "--name", "after the loss"], env)
    expect(created.code).toBe(0)
    const newKey = printed(created.stdout, "application key")
    expect(newKey).toMatch(/^a_sk_/)

    // The settings of a first start are ignored now, with a warning naming the tool.
    const second = await startServerProcess({ ...env, BOOTSTRAP_APP_KEY: "a_sk_too_late_for_this_database_0123" })
    try {
      expect(second.output()).toMatch(/BOOTSTRAP_APP_KEY is ignored.*npm run voltaic -- keys create/)
      expect(second.output()).not.toContain("admin password:")
      expect(await whoami(second.port, "a_sk_too_late_for_this_database_0123")).toBe(401)
      expect(await whoami(second.port, newKey)).toBe(200)
      expect(await whoami(second.port, oldToken)).toBe(401)
      const signedIn = await signIn(second.port, newKey, email, newPassword)
      expect(signedIn.status).toBe(200)
      expect(await whoami(second.port, (await signedIn.json()).accessToken)).toBe(200)
    } finally {
      expect(await second.stop()).toBe(0)
    }
  }, 180_000)
})

describe("the recovery commands' refusals", () => {
  it("name the option and the rule, and exit non-zero", async () => {
    const env = await storeEnv("pglite", "refusals")
    const noOrganisation = await runCli(["keys", "create"], env)
    expect(noOrganisation.code).not.toBe(0)
    expect(stderrLines(noOrganisation.stderr)).toEqual([
      "voltaic: the database has no organisation yet: start the server once, and it creates the first one"
    ])
    const short = await runCli(["admin", "reset-password", "--password", "short"], env)
    expect(stderrLines(short.stderr)).toEqual(["voltaic: --password: must be at least 8 characters"])
    const unknown = await runCli(["keys", "create", "--organisation", "org_missing"], env)
    expect(stderrLines(unknown.stderr)).toEqual(["voltaic: --organisation: no organisation has the id org_missing"])
  }, 120_000)
})
