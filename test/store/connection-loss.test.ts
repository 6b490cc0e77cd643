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

  /**
   * Submits one event while the device row is locked (the writer's statement waits on it) and
   * terminates the backends once a statement waits on the lock: `once`, then releases the lock;
   * or `always`, every new waiter (the writer's retries) until the event is answered.
   */
  const cutWhileWriting = async (id: string, cuts: "once" | "always") => {
    // Written again for 300 ms after a lost connection, then answered with the failure.
    const writer = makeWriter(sql, { retryLostForMs: 300 })
    let answered: Exit.Exit<void, SqlError> | undefined
    await admin.begin(async (tx) => {
      await tx`SELECT 1 FROM devices WHERE id = 'dev_l' FOR UPDATE`
      expect(writer.service.submit(event(id), (exit) => (answered = exit))).toBe(true)
      const cut = new Set<number>()
      const waiting = async () => {
        // Inside a transaction, pg_stat_activity is read once and kept (stats_fetch_consistency).
        await tx`SELECT pg_stat_clear_snapshot()`
        return (await tx<Array<{ pid: number }>>`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
          .map((r) => r.pid).filter((pid) => !cut.has(pid))
      }
      const terminate = async (pids: ReadonlyArray<number>) => {
        for (const pid of pids) cut.add(pid)
        await tx`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
      }
      if (cuts === "once") {
        let pids: Array<number> = []
        await until("a statement waiting on the lock", async () => (pids = await waiting()).length > 0)
        await terminate(pids)
        return
      }
      await until("the event to be answered", async () => {
        const pids = await waiting()
        if (pids.length > 0) await terminate(pids)
        return answered !== undefined
      })
    })
    await until("the event to be answered", async () => answered !== undefined)
    return answered as Exit.Exit<void, SqlError>
  }

  it("writes a batch whose connection was cut again on a new connection, and logs the loss and the recovery once", async () => {
    const answered = await cutWhileWriting("evt_cut_once", "once")
    expect(Exit.isSuccess(answered)).toBe(true)
    expect(await admin`SELECT id FROM events WHERE id = 'evt_cut_once'`).toHaveLength(1)
    // A statement that started before the last connection was seen closing does not count as the recovery.
    await until("the recovery line", async () => {
      await Effect.runPromise(sql.query("SELECT 1"))
      return lines("store: reconnected").length > 0
    })
    await Effect.runPromise(sql.query("SELECT 1"))
    expect(lines("store: lost the connection to Postgres (").map((l) => l.level)).toEqual(["Warn"])
    expect(lines("store: reconnected to Postgres after ").map((l) => l.level)).toEqual(["Info"])
  })

  it("answers a batch cut on every try with the failure (never an acknowledgement) and stores none of it", async () => {
    const answered = await cutWhileWriting("evt_cut_always", "always")
    const failure = Exit.isFailure(answered) ? answered.cause.reasons[0] : undefined
    expect(failure !== undefined && failure._tag === "Fail" && isConnectionLoss(failure.error)).toBe(true)
    expect(await admin`SELECT id FROM events WHERE id = 'evt_cut_always'`).toHaveLength(0)
    // The next write goes through on a new connection.
    await Effect.runPromise(makeWriter(sql).service.write(event("evt_after")))
    expect(await admin`SELECT id FROM events WHERE id = 'evt_after'`).toHaveLength(1)
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
