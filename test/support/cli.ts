import { execFileSync } from "node:child_process"
import { mkdtemp, rm } from "node:fs/promises"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createPostgresDatabase, type StoreKind, type TestDatabase } from "./databases.ts"

/** Fresh stores for one test file's command-line runs: a PGlite directory or a Postgres database each. */
export const makeStores = () => {
  let dir: string | undefined
  const databases: Array<TestDatabase> = []
  return {
    /** The settings naming a new, empty store of `kind`. */
    env: async (kind: StoreKind, name: string): Promise<Record<string, string>> => {
      dir ??= await mkdtemp(join(tmpdir(), "voltaic-cli-"))
      if (kind === "pglite") return { DATA_DIR: join(dir, name) }
      const db = await createPostgresDatabase()
      databases.push(db)
      return { DATABASE_URL: db.url }
    },
    /** A scratch directory beside the stores, for files the test writes. */
    dir: async () => (dir ??= await mkdtemp(join(tmpdir(), "voltaic-cli-"))),
    cleanup: async () => {
      if (dir !== undefined) await rm(dir, { recursive: true, force: true })
      for (const db of databases) await db.drop()
    }
  }
}

/** A TCP port nobody held a moment ago (bound on port 0 and let go). */
export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/** A self-signed certificate and its key for `name`, valid for `days`, made with openssl. */
export const makeCertificate = (dir: string, name: string, days: number) => {
  const cert = join(dir, `${name}.crt`)
  const key = join(dir, `${name}.key`)
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", String(days), "-subj", `/CN=${name}`,
    "-keyout", key, "-out", cert
  ], { stdio: "ignore" })
  return { cert, key }
}

/** A value the server or a command printed as `label:   value`. */
export const printed = (output: string, label: string): string => {
  const value = new RegExp(`${label}:\\s+(\\S+)`).exec(output)?.[1]
  if (value === undefined) throw new Error(`no "${label}" in:\n${output}`)
  return value
}

/** stderr's lines, without npm's own warnings. */
export const stderrLines = (stderr: string) => stderr.trim().split("\n").filter((l) => l !== "" && !/^npm warn/.test(l))
