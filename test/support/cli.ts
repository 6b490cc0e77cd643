import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { mkdtemp, rm } from "node:fs/promises"
import { createSocket } from "node:dgram"
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

/** Linux's ephemeral range: where a bind to port 0 and a client's source port are taken from. */
const ephemeralRange = (): readonly [number, number] => {
  try {
    const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number)
    if (Number.isInteger(low) && Number.isInteger(high)) return [low, high]
  } catch {
    // not Linux: the IANA range, which macOS and Windows use
  }
  return [49152, 65535]
}

const freeOn = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => {
      const udp = createSocket("udp4")
      udp.once("error", () => server.close(() => resolve(false)))
      udp.bind(port, "127.0.0.1", () => udp.close(() => server.close(() => resolve(true))))
    })
  })

const picked = new Set<number>()

/**
 * A port free for TCP and UDP, outside the ephemeral range, for a process started later to bind:
 * every other listener in the suites binds port 0, which the kernel serves from the ephemeral range,
 * so a port picked there could be handed to another suite's server before ours binds it (a doctor
 * run once found its MQTTS_PORT held by another test's server). Never the same port twice per file.
 */
export const unusedPort = async (): Promise<number> => {
  const [low, high] = ephemeralRange()
  // The larger stretch outside the range: below it (from 10000) or above it.
  const [from, to] = low - 10_000 >= 65_535 - high ? [10_000, low - 1] : [high + 1, 65_535]
  for (let tries = 0; tries < 200; tries++) {
    const port = from + Math.floor(Math.random() * (to - from + 1))
    if (picked.has(port)) continue
    if (await freeOn(port)) {
      picked.add(port)
      return port
    }
  }
  throw new Error(`no port free for TCP and UDP in ${from}–${to} after 200 tries`)
}

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
