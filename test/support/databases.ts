import postgres from "postgres"
import { randomBytes } from "node:crypto"

/** The Postgres server of the store suite; CI and this machine have one at 127.0.0.1:5432. */
export const POSTGRES_ADMIN_URL = process.env.TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test"

export interface TestDatabase {
  readonly url: string
  drop(): Promise<void>
}

/**
 * A fresh, empty database on the Postgres server for one test file, dropped afterwards.
 * Fails (never skips) when the server is unreachable: the Postgres suite is mandatory.
 */
export const createPostgresDatabase = async (): Promise<TestDatabase> => {
  const admin = postgres(POSTGRES_ADMIN_URL, { max: 1, onnotice: () => {}, connect_timeout: 5 })
  const name = `voltaic_test_${randomBytes(6).toString("hex")}`
  try {
    await admin.unsafe(`CREATE DATABASE ${name}`)
  } catch (cause) {
    await admin.end({ timeout: 1 })
    throw new Error(`the Postgres suite needs a server at ${POSTGRES_ADMIN_URL}: ${String(cause)}`)
  }
  const url = new URL(POSTGRES_ADMIN_URL)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    drop: async () => {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      await admin.end({ timeout: 1 })
    }
  }
}

export type StoreKind = "pglite" | "postgres"
export const STORE_KINDS: ReadonlyArray<StoreKind> = ["pglite", "postgres"]
