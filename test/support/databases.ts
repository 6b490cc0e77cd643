import { Context, Effect, Exit, Layer, Redacted, Scope } from "effect"
import postgres from "postgres"
import { randomBytes } from "node:crypto"
import { migrate } from "../../src/store/migrate.ts"
import { Sql, type SqlClient } from "../../src/store/Sql.ts"

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

export interface TestStore {
  readonly sql: SqlClient
  /** The Postgres database's URL; undefined on PGlite. */
  readonly url: string | undefined
  /** Closes the store and drops its Postgres database. */
  close(): Promise<void>
}

/**
 * A store of `kind` for one test file: a new Postgres database (`createPostgresDatabase`) or PGlite
 * in memory, migrated unless `migrated` is false.
 */
export const openTestStore = async (kind: StoreKind, options: { readonly migrated?: boolean } = {}): Promise<TestStore> => {
  const db = kind === "postgres" ? await createPostgresDatabase() : undefined
  const scope = await Effect.runPromise(Scope.make())
  const target = db ? { _tag: "postgres" as const, url: Redacted.make(db.url) } : { _tag: "pglite" as const, dataDir: undefined }
  const sql = Context.get(await Effect.runPromise(Layer.buildWithScope(Sql.layer(target), scope)), Sql)
  if (options.migrated !== false) await Effect.runPromise(Effect.provideService(migrate, Sql, sql))
  return {
    sql,
    url: db?.url,
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await db?.drop()
    }
  }
}
