import { Cause, Effect, Exit } from "effect"
import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { newId } from "../../src/domain/ids.ts"
import { COPY_EVENTS_FROM_ROWS, type EventRow, type WriteItem, writeRetried } from "../../src/store/batch.ts"
import type { SqlClient } from "../../src/store/Sql.ts"
import { openTestStore, STORE_KINDS } from "../support/databases.ts"

/**
 * migrations/0016: events' device is checked once per statement (a trigger) instead of by a
 * foreign key, with the same guarantees: no event of a device that does not exist, and none left
 * behind when its device is deleted, also when the two happen at once.
 */

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

const event = (organisationId: string, deviceId: string, extra: Partial<EventRow> = {}): WriteItem => {
  const now = Date.now()
  return {
    _tag: "event",
    row: { id: newId("evt", now), organisationId, deviceId, name: "temperature", data: "{\"value\":1}", timestamp: now, receivedAt: now, protocol: "mqtt", ...extra }
  }
}

const failureCode = (exit: Exit.Exit<unknown, { readonly _tag: string }>) => {
  if (Exit.isSuccess(exit)) return "succeeded"
  const reason = exit.cause.reasons.find(Cause.isFailReason)
  return reason !== undefined && "code" in reason.error ? reason.error.code : "no code"
}

describe.each(STORE_KINDS)("events' device on %s", (kind) => {
  let sql: SqlClient
  let close: () => Promise<void>
  const count = async (text: string, params: ReadonlyArray<unknown> = []) =>
    (await run(sql.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${text}`, params)))[0].n

  /** A new organisation with `n` devices. */
  const seed = async (n: number) => {
    const now = Date.now()
    const organisationId = newId("org", now)
    const devices = Array.from({ length: n }, () => newId("dev", now))
    await run(sql.query("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ($1, 'o', $2, $2)", [organisationId, now]))
    await run(sql.query(
      `INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
         SELECT d.id, $2, 'h-' || d.id, d.id, $3, $3 FROM unnest($1::text[]) AS d(id)`,
      [devices, organisationId, now]
    ))
    return { organisationId, devices }
  }

  beforeAll(async () => {
    ;({ sql, close } = await openTestStore(kind))
  })
  afterAll(() => close())

  it("refuses a batch naming a device that does not exist with the foreign key's SQLSTATE, storing none of it", async () => {
    const { organisationId, devices } = await seed(3)
    const items = [...devices.map((d) => event(organisationId, d)), event(organisationId, "dev_missing")]
    const exit = await Effect.runPromiseExit(writeRetried(sql, items, 0))
    expect(failureCode(exit)).toBe("23503")
    expect(await count("events WHERE organisation_id = $1", [organisationId])).toBe(0)
    // The same devices without the missing one go in.
    await run(writeRetried(sql, items.slice(0, 3), 0))
    expect(await count("events WHERE organisation_id = $1", [organisationId])).toBe(3)
  })

  it("names the missing device in the failure's detail", async () => {
    const { organisationId, devices } = await seed(1)
    const exit = await Effect.runPromiseExit(sql.query(
      "INSERT INTO events (id, organisation_id, device_id, name, timestamp, received_at, protocol) VALUES ($1, $2, $3, 'x', 1, 1, 'http'), ($4, $2, 'dev_gone', 'x', 1, 1, 'http')",
      [newId("evt"), organisationId, devices[0], newId("evt")]
    ))
    expect(failureCode(exit)).toBe("23503")
    const reason = Exit.isFailure(exit) ? exit.cause.reasons.find(Cause.isFailReason) : undefined
    const cause: unknown = reason?.error.cause
    const detail = typeof cause === "object" && cause !== null && "detail" in cause ? cause.detail : undefined
    expect(detail).toBe("Key (device_id)=(dev_gone) is not present in table \"devices\".")
  })

  it("checks a batch large enough for PGlite's COPY the same way", async () => {
    const { organisationId, devices } = await seed(10)
    const items = Array.from({ length: COPY_EVENTS_FROM_ROWS }, (_, i) => event(organisationId, devices[i % devices.length]))
    items.splice(COPY_EVENTS_FROM_ROWS / 2, 0, event(organisationId, "dev_missing"))
    const exit = await Effect.runPromiseExit(writeRetried(sql, items, 0))
    expect(failureCode(exit)).toBe("23503")
    expect(await count("events WHERE organisation_id = $1", [organisationId])).toBe(0)
    expect(await count("device_seen ds JOIN devices d ON d.id = ds.device_id WHERE d.organisation_id = $1 AND ds.last_seen_at IS NOT NULL", [organisationId])).toBe(0)
  })

  it("checks the batch written in a transaction (events with a file) the same way", async () => {
    const { organisationId, devices } = await seed(1)
    const file = { filename: "a.bin", contentType: "application/octet-stream", bytes: new Uint8Array([1, 2, 3]) }
    const missing = event(organisationId, "dev_missing", { file })
    const exit = await Effect.runPromiseExit(writeRetried(sql, [event(organisationId, devices[0], { file }), missing], 0))
    expect(failureCode(exit)).toBe("23503")
    expect(await count("events WHERE organisation_id = $1", [organisationId])).toBe(0)
    expect(await count("event_files WHERE event_id = $1", [missing.row.id])).toBe(0)
  })

  it("refuses moving an event to a device that does not exist", async () => {
    const { organisationId, devices } = await seed(1)
    const item = event(organisationId, devices[0])
    await run(writeRetried(sql, [item], 0))
    const exit = await Effect.runPromiseExit(sql.query("UPDATE events SET device_id = 'dev_missing' WHERE id = $1", [item.row.id]))
    expect(failureCode(exit)).toBe("23503")
    expect(await count("events WHERE id = $1 AND device_id = $2", [item.row.id, devices[0]])).toBe(1)
  })

  it("deletes a deleted device's events and their files, and no other device's", async () => {
    const { organisationId, devices } = await seed(2)
    const file = { filename: null, contentType: "text/plain", bytes: new Uint8Array([104, 105]) }
    const items = [
      event(organisationId, devices[0]),
      event(organisationId, devices[0], { file }),
      event(organisationId, devices[1]),
      event(organisationId, devices[1], { file })
    ]
    await run(writeRetried(sql, items, 0))
    await run(sql.query("DELETE FROM devices WHERE id = $1", [devices[0]]))
    expect(await count("events WHERE device_id = $1", [devices[0]])).toBe(0)
    expect(await count("event_files WHERE event_id = $1", [items[1].row.id])).toBe(0)
    expect(await count("events WHERE device_id = $1", [devices[1]])).toBe(2)
    expect(await count("event_files WHERE event_id = $1", [items[3].row.id])).toBe(1)
  })

  it("deletes every device's events with their organisation", async () => {
    const { organisationId, devices } = await seed(20)
    await run(writeRetried(sql, devices.flatMap((d) => [event(organisationId, d), event(organisationId, d)]), 0))
    const other = await seed(1)
    await run(writeRetried(sql, [event(other.organisationId, other.devices[0])], 0))
    expect(await count("events WHERE organisation_id = $1", [organisationId])).toBe(40)
    await run(sql.query("DELETE FROM organisations WHERE id = $1", [organisationId]))
    expect(await count("events WHERE organisation_id = $1", [organisationId])).toBe(0)
    expect(await count("events WHERE organisation_id = $1", [other.organisationId])).toBe(1)
  })
})

describe("events' device on Postgres, deleted while its events are written", () => {
  let sql: SqlClient
  let close: () => Promise<void>
  let a: postgres.Sql
  let b: postgres.Sql

  beforeAll(async () => {
    const store = await openTestStore("postgres")
    ;({ sql, close } = store)
    a = postgres(store.url!, { max: 1, onnotice: () => {} })
    b = postgres(store.url!, { max: 1, onnotice: () => {} })
  })
  afterAll(async () => {
    await a.end({ timeout: 1 })
    await b.end({ timeout: 1 })
    await close()
  })

  const seedDevice = async () => {
    const now = Date.now()
    const organisationId = newId("org", now)
    const deviceId = newId("dev", now)
    await a.unsafe("INSERT INTO organisations (id, name, created_at, updated_at) VALUES ($1, 'o', $2, $2)", [organisationId, now])
    await a.unsafe(
      "INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ($1, $2, 'h', 'd', $3, $3)",
      [deviceId, organisationId, now]
    )
    return { organisationId, deviceId }
  }
  const insertEvent = (tx: postgres.Sql | postgres.TransactionSql, organisationId: string, deviceId: string) =>
    tx.unsafe(
      `INSERT INTO events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol)
         VALUES ($1, $2, $3, 'temperature', NULL, 1, 1, 'mqtt')`,
      [newId("evt", Date.now()), organisationId, deviceId]
    )
  const eventsOf = async (deviceId: string) =>
    (await run(sql.query<{ n: number }>("SELECT count(*)::int AS n FROM events WHERE device_id = $1", [deviceId])))[0].n
  /** A transaction on `conn` that has run `first` and stays open until `commit` is called. */
  const heldOpen = async (conn: postgres.Sql, first: (tx: postgres.TransactionSql) => Promise<unknown>) => {
    let commit!: () => void
    const gate = new Promise<void>((resolve) => (commit = resolve))
    let ran!: () => void
    const ranOnce = new Promise<void>((resolve) => (ran = resolve))
    const finished = conn.begin(async (tx) => {
      await first(tx)
      ran()
      await gate
    })
    await Promise.race([ranOnce, finished])
    return { commit, finished }
  }
  /** Whether `promise` is still pending after a while: it waits on a lock. */
  const stillWaiting = async (promise: Promise<unknown>) => {
    let settled = false
    void promise.then(() => (settled = true), () => (settled = true))
    await new Promise((resolve) => setTimeout(resolve, 300))
    return !settled
  }

  it("a delete that begins after the events were written waits for their commit, then takes them with it", async () => {
    const { organisationId, deviceId } = await seedDevice()
    const { commit, finished: writing } = await heldOpen(a, (tx) => insertEvent(tx, organisationId, deviceId))
    const deleting = b.unsafe("DELETE FROM devices WHERE id = $1", [deviceId])
    // Without the check's KEY SHARE lock the delete would go through now, and the events commit after it.
    const waited = await stillWaiting(deleting)
    commit()
    await writing
    await deleting
    expect(waited).toBe(true)
    expect(await eventsOf(deviceId)).toBe(0)
  })

  it("events written while a delete is uncommitted wait for it, then fail as the foreign key failed", async () => {
    const { organisationId, deviceId } = await seedDevice()
    const { commit, finished: deleting } = await heldOpen(b, (tx) => tx.unsafe("DELETE FROM devices WHERE id = $1", [deviceId]))
    const writing = insertEvent(a, organisationId, deviceId).then(() => "stored", (e: { code?: string }) => e.code)
    const waited = await stillWaiting(writing)
    commit()
    await deleting
    expect(waited).toBe(true)
    expect(await writing).toBe("23503")
    expect(await eventsOf(deviceId)).toBe(0)
  })
})
