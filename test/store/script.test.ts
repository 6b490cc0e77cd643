import { Context, Effect, Exit, Layer, Redacted, Scope } from "effect"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { Sql, type SqlClient, SqlError } from "../../src/store/Sql.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"

/**
 * `SqlClient.script`: statements in one transaction, sent together (PGlite's event batches of
 * 500+ use it: COPY, then the devices' update, in one request to PGlite's thread).
 */
const suite = (name: string, open: (scope: Scope.Scope) => Promise<{ sql: SqlClient; drop: () => Promise<void> }>) =>
  describe(`script on the ${name} store`, () => {
    let scope: Scope.Closeable
    let sql: SqlClient
    let drop: () => Promise<void>
    const COPY = "COPY scripted (n, label) FROM STDIN"
    const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromiseExit(effect)
    const rows = () => Effect.runPromise(sql.query<{ n: string; label: string | null }>("SELECT n::text AS n, label FROM scripted ORDER BY scripted.n"))
    const failure = (exit: Exit.Exit<unknown, unknown>) => Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
    const clear = () => Effect.runPromise(sql.exec("TRUNCATE scripted"))

    beforeAll(async () => {
      scope = await Effect.runPromise(Scope.make())
      ;({ sql, drop } = await open(scope))
      await Effect.runPromise(sql.exec("CREATE TABLE scripted (n bigint PRIMARY KEY CHECK (n >= 0), label text)"))
    })
    beforeEach(clear)
    afterAll(async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await drop()
    })

    it("runs its statements in order, a COPY among them, and commits them together", async () => {
      const exit = await run(sql.script([
        { copy: COPY, data: "1\tone\n2\t\\N\n3\ttab\\there\\\\\n" },
        // Sees the copied rows: the statements run in the order given.
        { text: "UPDATE scripted SET label = $1 WHERE n = $2", params: ["two", "2"] },
        { text: "INSERT INTO scripted (n, label) SELECT n + 10, label FROM scripted" }
      ]))
      expect(exit).toEqual(Exit.void)
      expect(await rows()).toEqual([
        { n: "1", label: "one" },
        { n: "2", label: "two" },
        { n: "3", label: "tab\there\\" },
        { n: "11", label: "one" },
        { n: "12", label: "two" },
        { n: "13", label: "tab\there\\" }
      ])
    })

    it("rolls every statement back when one fails, with that statement's own error", async () => {
      const exit = await run(sql.script([
        { copy: COPY, data: "1\tkept?\n" },
        { text: "INSERT INTO scripted (n) VALUES ($1)", params: ["2"] },
        { text: "INSERT INTO scripted (n) VALUES ($1)", params: ["-3"] },
        { text: "INSERT INTO scripted (n) VALUES ($1)", params: ["4"] }
      ]))
      const error = failure(exit)
      expect(error).toBeInstanceOf(SqlError)
      expect((error as SqlError).code).toBe("23514")
      expect(await rows()).toEqual([])
      // A malformed COPY row fails the script as well.
      expect(Exit.isFailure(await run(sql.script([{ text: "INSERT INTO scripted (n) VALUES (5)" }, { copy: COPY, data: "x\tbad\n" }])))).toBe(true)
      expect(await rows()).toEqual([])
      // The store answers after the failures.
      expect(await run(sql.script([{ text: "INSERT INTO scripted (n) VALUES (6)" }]))).toEqual(Exit.void)
      expect(await rows()).toEqual([{ n: "6", label: null }])
    })

    it("joins the transaction it runs in: it commits and rolls back with it", async () => {
      const rolledBack = await run(sql.transaction((tx) =>
        Effect.gen(function*() {
          yield* tx.query("INSERT INTO scripted (n) VALUES (1)")
          yield* tx.script([{ copy: COPY, data: "2\tin\n" }, { text: "UPDATE scripted SET label = 'seen' WHERE n = 1" }])
          const seen = yield* tx.query<{ label: string | null }>("SELECT label FROM scripted WHERE n = 1")
          expect(seen).toEqual([{ label: "seen" }])
          return yield* Effect.fail("give up" as const)
        })
      ))
      expect(failure(rolledBack)).toBe("give up")
      expect(await rows()).toEqual([])
      const committed = await run(sql.transaction((tx) =>
        Effect.andThen(tx.query("INSERT INTO scripted (n) VALUES (1)"), tx.script([{ copy: COPY, data: "2\tin\n" }]))
      ))
      expect(committed).toEqual(Exit.void)
      expect(await rows()).toEqual([{ n: "1", label: null }, { n: "2", label: "in" }])
    })

    it("keeps scripts sent at once apart: each commits whole, and a failing one takes none of the others' rows", async () => {
      const exits = await Promise.all(Array.from({ length: 40 }, (_, i) =>
        run(sql.script([
          { copy: COPY, data: `${i * 2}\tfirst\n` },
          // Every tenth script fails on its second statement.
          { text: "INSERT INTO scripted (n, label) VALUES ($1, 'second')", params: [String(i % 10 === 9 ? -1 : i * 2 + 1)] }
        ]))
      ))
      expect(exits.filter(Exit.isFailure)).toHaveLength(4)
      const stored = await rows()
      expect(stored).toHaveLength(72)
      expect(new Set(stored.map((r) => Number(r.n) >> 1)).size).toBe(36)
      expect(stored.some((r) => [18, 38, 58, 78].includes(Number(r.n)))).toBe(false)
    })
  })

suite("embedded", async (scope) => ({
  sql: Context.get(await Effect.runPromise(Layer.buildWithScope(Sql.layer({ _tag: "pglite", dataDir: undefined }), scope)), Sql),
  drop: async () => {}
}))

suite("Postgres", async (scope) => {
  const db: TestDatabase = await createPostgresDatabase()
  return {
    sql: Context.get(await Effect.runPromise(Layer.buildWithScope(Sql.layer({ _tag: "postgres", url: Redacted.make(db.url) }), scope)), Sql),
    drop: () => db.drop()
  }
})
