import { Context, Effect, Exit, Layer, Logger, Redacted, Scope } from "effect"
import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { migrate } from "../../src/store/migrate.ts"
import { isConnectionLoss, Sql, type SqlClient, type SqlError } from "../../src/store/Sql.ts"
import { makeWriter, type WriteItem } from "../../src/store/Writer.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"

const event = (id: string): WriteItem => ({
  _tag: "event",
  row: { id, organisationId: "org_l", deviceId: "dev_l", name: "n", data: "1", timestamp: 1, receivedAt: 1, protocol: "mqtt" }
})

const until = async (what: string, check: () => Promise<boolean>) => {
  for (let i = 0; i < 200; i++) {
    if (await check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

describe("the Postgres store when the server terminates its connections", () => {
  let db: TestDatabase
  let scope: Scope.Closeable
  let sql: SqlClient
  let admin: postgres.Sql
  const logs: Array<{ level: string; message: string }> = []
  const lines = (prefix: string) => logs.filter((l) => l.message.startsWith(prefix))

  beforeAll(async () => {
    db = await createPostgresDatabase()
    admin = postgres(db.url, { max: 1, onnotice: () => {} })
    scope = await Effect.runPromise(Scope.make())
    const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
      const parts = Array.isArray(message) ? message : [message]
      logs.push({ level: logLevel, message: parts.map(String).join(" ") })
    })
    const layer = Sql.layer({ _tag: "postgres", url: Redacted.make(db.url) }).pipe(Layer.provide(Logger.layer([capture])))
    sql = Context.get(await Effect.runPromise(Layer.buildWithScope(layer, scope)), Sql)
    await Effect.runPromise(Effect.provideService(migrate, Sql, sql))
    await Effect.runPromise(sql.exec(`
      INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_l', 'l', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_l', 'org_l', 'h', 'l', 1, 1);
    `))
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await admin.end({ timeout: 1 })
    await db.drop()
  })

  it("fails the batch it cut, stores none of it, reconnects on the next statement, and logs the loss and the recovery once", async () => {
    const writer = makeWriter(sql)
    let answered: Exit.Exit<void, SqlError> | undefined
    await admin.begin(async (tx) => {
      // The device row locked here holds the writer's statement until the backends are terminated.
      await tx`SELECT 1 FROM devices WHERE id = 'dev_l' FOR UPDATE`
      expect(writer.service.submit(event("evt_cut"), (exit) => (answered = exit))).toBe(true)
      await until("the writer's statement to wait on the lock", async () =>
        (await tx`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)[0].n > 0)
      await tx`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
    })
    await until("the cut batch to be answered", async () => answered !== undefined)
    expect(answered !== undefined && Exit.isFailure(answered)).toBe(true)
    const failure = answered !== undefined && Exit.isFailure(answered) ? answered.cause.reasons[0] : undefined
    expect(failure !== undefined && failure._tag === "Fail" && isConnectionLoss(failure.error)).toBe(true)
    expect(await admin`SELECT id FROM events WHERE id = 'evt_cut'`).toHaveLength(0)

    // The next write goes through on a new connection.
    await Effect.runPromise(writer.service.write(event("evt_after")))
    expect(await admin`SELECT id FROM events WHERE id = 'evt_after'`).toHaveLength(1)
    // A statement that started before the last connection was seen closing does not count as the recovery.
    await until("the recovery line", async () => {
      await Effect.runPromise(sql.query("SELECT 1"))
      return lines("store: reconnected").length > 0
    })
    // More statements after the recovery, and another failure-free round, add no line.
    await Effect.runPromise(sql.query("SELECT 1"))
    expect(lines("store: lost the connection to Postgres (")).toHaveLength(1)
    expect(lines("store: lost the connection to Postgres (")[0].level).toBe("Warn")
    expect(lines("store: reconnected to Postgres after ").map((l) => l.level)).toEqual(["Info"])
  })

  it("logs a second outage as its own pair of lines", async () => {
    logs.length = 0
    await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
    await until("the loss and the recovery", async () => {
      await Effect.runPromise(Effect.ignore(sql.query("SELECT 1")))
      return lines("store: reconnected").length > 0
    })
    expect(lines("store: lost the connection to Postgres (")).toHaveLength(1)
    expect(lines("store: reconnected to Postgres after ")).toHaveLength(1)
  })
})
