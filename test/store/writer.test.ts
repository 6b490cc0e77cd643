import { Cause, Effect, Exit } from "effect"
import postgres from "postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  COPY_EVENTS_FROM_ROWS,
  DEVICES_ONE_BY_ONE,
  INSERT_EVENTS_SEEN_ONE_BY_ONE,
  INSERT_EVENTS_TOUCH,
  INSERT_EVENTS_TOUCH_ONE_SESSION,
  writeRetried
} from "../../src/store/batch.ts"
import { touchDevices } from "../../src/store/devices.ts"
import type { SqlClient } from "../../src/store/Sql.ts"
import { makeWriter, type WriteItem } from "../../src/store/Writer.ts"
import { openTestStore, STORE_KINDS, type TestStore } from "../support/databases.ts"

const event = (i: number, deviceId = "dev_w"): WriteItem => ({
  _tag: "event",
  row: {
    id: `evt_w${String(i).padStart(6, "0")}`,
    organisationId: "org_w",
    deviceId,
    name: "n",
    data: JSON.stringify({ i }),
    timestamp: i,
    receivedAt: 1_000 + i,
    protocol: "http"
  }
})

describe.each(STORE_KINDS)("the group-commit writer on %s", (kind) => {
  let store: TestStore
  let sql: SqlClient
  const count = async (table: string) =>
    Number((await Effect.runPromise(sql.query<{ n: number }>(`SELECT count(*)::int8 AS n FROM ${table}`)))[0].n)

  beforeAll(async () => {
    store = await openTestStore(kind)
    sql = store.sql
    await Effect.runPromise(sql.exec(`
      INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_w', 'w', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_w', 'org_w', 'h1', 'w', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_w2', 'org_w', 'h2', 'w2', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_w3', 'org_w', 'h3', 'w3', 1, 1);
    `))
  })
  afterAll(() => store.close())

  it("writes concurrent items in few batches and resolves each after its commit", async () => {
    const batches: Array<number> = []
    // A batch of plain events is one statement on its own (the insert, or the function
    // `events_written` holding it), or a script (PGlite's COPY); any other batch is a transaction.
    const writesEvents = (text: string) => text.includes("INSERT INTO events") || text.includes("events_written(")
    const counting: SqlClient = {
      ...sql,
      query: (text, params) => {
        if (writesEvents(text)) batches.push(0)
        return sql.query(text, params)
      },
      write: (text, params) => {
        if (writesEvents(text)) batches.push(0)
        return sql.write(text, params)
      },
      transaction: (f) => {
        batches.push(0)
        return sql.transaction(f)
      },
      script: (steps) => {
        batches.push(0)
        return sql.script(steps)
      }
    }
    const writer = makeWriter(counting, { maxBatch: 500, maxPending: 10_000 })
    const items = Array.from({ length: 1_000 }, (_, i) => event(i))
    await Promise.all(items.map((item) => Effect.runPromise(writer.service.write(item))))
    expect(await count("events")).toBe(1_000)
    // 1,000 concurrent writes with batches of at most 500: a handful of transactions, not 1,000.
    expect(batches.length).toBeGreaterThanOrEqual(2)
    expect(batches.length).toBeLessThanOrEqual(4)
    const [device] = await Effect.runPromise(sql.query<{ last_seen_at: number }>("SELECT last_seen_at FROM device_seen WHERE device_id = 'dev_w'"))
    expect(device.last_seen_at).toBe(1_000 + 999)
    expect(writer.service.pending()).toBe(0)
  })

  it("moves a device's lastSeenAt forward only, in an event batch and in touchDevices (each driver's statement)", async () => {
    const lastSeen = async () =>
      Number((await Effect.runPromise(sql.query<{ t: number }>("SELECT last_seen_at AS t FROM device_seen WHERE device_id = 'dev_w3'")))[0].t)
    const writer = makeWriter(sql)
    await Effect.runPromise(writer.service.write(event(900_000, "dev_w3")))
    expect(await lastSeen()).toBe(901_000)
    // An older receipt (a batch of its own) leaves it.
    await Effect.runPromise(writer.service.write(event(800_000, "dev_w3")))
    expect(await lastSeen()).toBe(901_000)
    // touchDevices answers the devices it moved.
    expect(await Effect.runPromise(touchDevices(sql, new Map([["dev_w3", 900_500]])))).toEqual([])
    expect(await lastSeen()).toBe(901_000)
    expect(await Effect.runPromise(touchDevices(sql, new Map([["dev_w3", 950_000], ["dev_unknown", 950_000]])))).toEqual([{ id: "dev_w3" }])
    expect(await lastSeen()).toBe(950_000)
    // Two at once over the same devices, given in opposite orders: both complete, each device at the later time.
    const devices = ["dev_w", "dev_w2", "dev_w3"]
    for (let r = 1; r <= 10; r++) {
      const at = 950_000 + r * 10
      await Promise.all([
        Effect.runPromise(touchDevices(sql, new Map(devices.map((id) => [id, at])))),
        Effect.runPromise(touchDevices(sql, new Map([...devices].reverse().map((id) => [id, at + 1]))))
      ])
    }
    expect(await lastSeen()).toBe(950_101)
  })

  it("marks a batch's devices seen one by one when they are few, by a join when many; an unknown device fails the batch whole", async () => {
    const many = DEVICES_ONE_BY_ONE + 6
    const ids = Array.from({ length: many }, (_, i) => `dev_s${String(i).padStart(3, "0")}`)
    await Effect.runPromise(sql.query(
      `INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at)
         SELECT d.id, 'org_w', 'h-' || d.id, d.id, 1, 1 FROM unnest($1::text[]) AS d(id)`,
      [ids]
    ))
    const statements: Array<string> = []
    const watched: SqlClient = {
      ...sql,
      write: (text, params) => {
        statements.push(text)
        return sql.write(text, params)
      }
    }
    let next = 0
    /** One event per device, received at `at` plus the device's index. */
    const batch = (devices: ReadonlyArray<string>, at: number): Array<WriteItem> =>
      devices.map((deviceId, i) => {
        const n = next++
        return { _tag: "event", row: { id: `evt_s${n}`, organisationId: "org_w", deviceId, name: "n", data: null, timestamp: n, receivedAt: at + i, protocol: "mqtt" } }
      })
    const seenAt = async (devices: ReadonlyArray<string>) =>
      (await Effect.runPromise(sql.query<{ t: number | null }>("SELECT last_seen_at AS t FROM device_seen WHERE device_id = ANY($1::text[]) ORDER BY device_id", [devices])))
        .map((r) => (r.t === null ? null : Number(r.t)))
    const few = ids.slice(0, DEVICES_ONE_BY_ONE)
    const joined = sql.dialect === "pglite" ? INSERT_EVENTS_TOUCH_ONE_SESSION : INSERT_EVENTS_TOUCH

    // Few devices (in any order): one by one.
    await Effect.runPromise(writeRetried(watched, batch([...few].reverse(), 50_000), 0))
    expect(statements.at(-1)).toBe(INSERT_EVENTS_SEEN_ONE_BY_ONE)
    expect(await seenAt(few)).toEqual(few.map((_, i) => 50_000 + few.length - 1 - i))
    // Many: by the join; each device moves forward only.
    await Effect.runPromise(writeRetried(watched, batch(ids, 40_000 + 5), 0))
    expect(statements.at(-1)).toBe(joined)
    expect(await seenAt(ids)).toEqual(ids.map((_, i) => Math.max(40_005 + i, i < few.length ? 50_000 + few.length - 1 - i : 0)))
    await Effect.runPromise(writeRetried(watched, batch(ids, 60_000), 0))
    expect(await seenAt(ids)).toEqual(ids.map((_, i) => 60_000 + i))
    await Effect.runPromise(writeRetried(watched, batch(few, 1_000), 0))
    expect(await seenAt(few)).toEqual(few.map((_, i) => 60_000 + i))

    // A device that does not exist fails either statement whole: no event stored, no device moved.
    const before = await count("events")
    for (const devices of [[...few.slice(1), "dev_s_missing"], [...ids, "dev_s_missing"]]) {
      const exit = await Effect.runPromiseExit(writeRetried(watched, batch(devices, 90_000), 0))
      expect(Exit.isFailure(exit) && Cause.squash(exit.cause)).toMatchObject({ code: "23503" })
      expect(await count("events")).toBe(before)
      expect(await seenAt(ids)).toEqual(ids.map((_, i) => 60_000 + i))
    }
    expect(statements.slice(-2)).toEqual([INSERT_EVENTS_SEEN_ONE_BY_ONE, joined])

    // Concurrent batches over the same devices, in opposite orders, by either statement: no deadlock.
    for (const devices of [few, ids]) {
      const rounds = Array.from({ length: 10 }, (_, r) =>
        Promise.all([
          Effect.runPromise(writeRetried(sql, batch(devices, 100_000 + r * 1_000), 0)),
          Effect.runPromise(writeRetried(sql, batch([...devices].reverse(), 100_000 + r * 1_000), 0))
        ]))
      await Promise.all(rounds)
      expect(await seenAt(devices)).toEqual(devices.map((_, i) => 109_000 + Math.max(i, devices.length - 1 - i)))
    }
  })

  // Two sessions: Postgres only (PGlite has one, and no other transaction to take a lock).
  if (kind === "postgres") it("locks a batch's devices before their device_seen rows, the order a device's deletion takes them in", async () => {
    await Effect.runPromise(sql.exec(
      "INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_wl', 'org_w', 'hl', 'wl', 1, 1)"
    ))
    const raw = postgres(store.url!, { max: 2, onnotice: () => {} })
    try {
      // Another transaction holds the device's row, as a deletion does before its cascade.
      const holder = await raw.reserve()
      await holder`BEGIN`
      await holder`SELECT id FROM devices WHERE id = 'dev_wl' FOR UPDATE`
      const written = Effect.runPromiseExit(writeRetried(sql, [event(700_000, "dev_wl")], 0))
      const waiting = async () =>
        (await raw`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)[0].n
      for (let i = 0; i < 200 && (await waiting()) === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10))
      expect(await waiting()).toBe(1)
      // The batch waits on the device's row and holds no device_seen row: the deletion's cascade
      // (or this lock) takes it without waiting. Locked the other way round, the two deadlocked.
      const probe = await raw.reserve()
      await probe`BEGIN`
      expect(await probe`SELECT device_id FROM device_seen WHERE device_id = 'dev_wl' FOR UPDATE NOWAIT`).toHaveLength(1)
      await probe`ROLLBACK`
      probe.release()
      await holder`DELETE FROM devices WHERE id = 'dev_wl'`
      await holder`COMMIT`
      holder.release()
      const exit = await written
      expect(Exit.isFailure(exit) && Cause.squash(exit.cause)).toMatchObject({ code: "23503" })
      expect(await count("events WHERE device_id = 'dev_wl'")).toBe(0)
      expect(await count("device_seen WHERE device_id = 'dev_wl'")).toBe(0)
    } finally {
      await raw.end({ timeout: 1 })
    }
  })

  it("starts a lone batch at most every flushEveryMs, gathering what arrives meanwhile", async () => {
    // Each start is taken where the writer applies the rule: a hook on the SQL would add the
    // jitter of the fiber that runs the statement.
    const starts: Array<number> = []
    const writer = makeWriter(sql, { flushEveryMs: 40, onBatch: () => starts.push(performance.now()) })
    // A trickle: one item every 5 ms for 400 ms, each waited for by nobody but its callback.
    const done: Array<Promise<Exit.Exit<void, unknown>>> = []
    const trickleStart = performance.now()
    for (let i = 0; i < 80; i++) {
      done.push(new Promise((resolve) => writer.service.submit(event(6_000 + i), resolve)))
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    const trickleMs = performance.now() - trickleStart
    expect((await Promise.all(done)).every(Exit.isSuccess)).toBe(true)
    expect(await count("events WHERE timestamp >= 6000 AND timestamp < 7000")).toBe(80)
    // Back to back, 80 items this slow would go as ~80 batches: spaced 40 ms apart, one per
    // 40 ms of trickle (~10 on an idle machine; a busy one stretches the trickle, not the rule).
    expect(starts.length).toBeLessThanOrEqual(Math.ceil(trickleMs / 40) + 2)
    expect(starts.length).toBeLessThan(40)
    for (let i = 1; i < starts.length; i++) expect(starts[i] - starts[i - 1]).toBeGreaterThanOrEqual(39)
  })

  it("writes at once what arrives after it was idle for longer than flushEveryMs", async () => {
    // Spaced at 300 ms, so that "at once" and "held for the spacing" stand apart even when a busy
    // machine delays the writer's next turn by tens of milliseconds (seen: 72 ms in CI).
    const spacing = 300
    const starts: Array<number> = []
    const writer = makeWriter(sql, { flushEveryMs: spacing, onBatch: () => starts.push(performance.now()) })
    // A writer starts as if loaded: the first batch sets the spacing's clock.
    await Effect.runPromise(writer.service.write(event(6_200)))
    await new Promise((resolve) => setTimeout(resolve, spacing + 100))
    const submitted = performance.now()
    await Effect.runPromise(writer.service.write(event(6_201)))
    expect(starts).toHaveLength(2)
    expect(starts[1] - submitted).toBeLessThan(spacing / 2)
  })

  it("once it is not loaded, writes what arrives during a commit at once, beside it, and answers in order", async () => {
    // Each batch takes 10 ms more, so what arrives 3 ms after a start arrives while it commits.
    const slow = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.delay(effect, "10 millis")
    const slowed: SqlClient = {
      ...sql,
      query: (text, params) => slow(sql.query(text, params)),
      write: (text, params) => slow(sql.write(text, params)),
      transaction: (f) => slow(sql.transaction(f)),
      script: (steps) => slow(sql.script(steps))
    }
    // Spacing of 300 ms, so that "held until 300 ms after the last start" (loaded) stands well apart
    // from "at once" (not loaded) even on a busy machine: with 100 ms and a bound of 50, a batch
    // written at once was seen to start 72 ms after the one before it in CI (its commit, slowed).
    const spacing = 300
    const starts: Array<number> = []
    const writer = makeWriter(slowed, { flushEveryMs: spacing, onBatch: () => starts.push(performance.now()) })
    const write = (i: number) => Effect.runPromise(writer.service.write(event(8_000 + i)))
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
    // A writer starts as if loaded. Two batches far apart calm it: the mean gap between starts
    // (each gap counted up to 10 × spacing, averaged over ~8) must reach 2 × spacing, which after a
    // first batch takes a second one more than 7.25 × spacing later.
    await write(0)
    await pause(8 * spacing)
    await write(1)
    await pause(8 * spacing)
    const answered: Array<string> = []
    const first = write(2).then(() => answered.push("first"))
    await pause(3)
    const second = write(3).then(() => answered.push("second"))
    await Promise.all([first, second])
    expect(answered).toEqual(["first", "second"])
    // Loaded, the second would have waited for the first's commit and then until `spacing` after its start.
    expect(starts.length).toBe(4)
    expect(starts[3] - starts[2]).toBeLessThan(spacing / 2)
    // And the next, right after them, is not held until `spacing` after the last start either.
    await write(4)
    expect(starts.length).toBe(5)
    expect(starts[4] - starts[3]).toBeLessThan(spacing / 2)
    expect(await count("events WHERE timestamp >= 8000 AND timestamp < 9000")).toBe(5)
  })

  it("fails only the item whose row is bad, not its batch neighbours", async () => {
    const writer = makeWriter(sql)
    const good = [event(2_000, "dev_w2"), event(2_001, "dev_w2")]
    const bad = event(2_002, "dev_missing")
    const results = await Promise.all([...good, bad].map((item) => Effect.runPromiseExit(writer.service.write(item))))
    expect(results.map((r) => r._tag)).toEqual(["Success", "Success", "Failure"])
    const stored = await Effect.runPromise(sql.query<{ id: string }>("SELECT id FROM events WHERE device_id = 'dev_w2' ORDER BY id"))
    expect(stored.map((r) => r.id)).toEqual(["evt_w002000", "evt_w002001"])
  })

  it("refuses with Unavailable instead of queueing without bound", async () => {
    const writer = makeWriter(sql, { maxBatch: 10, maxPending: 20 })
    const items = Array.from({ length: 50 }, (_, i) => event(3_000 + i))
    const results = await Promise.all(items.map((item) => Effect.runPromiseExit(writer.service.write(item))))
    const refused = results.filter((r) => Exit.isFailure(r))
    expect(refused.length).toBe(30)
    for (const r of refused) {
      const reason = Exit.isFailure(r) ? r.cause.reasons.find(Cause.isFailReason) : undefined
      expect(reason?.error._tag).toBe("Unavailable")
    }
    expect(await count("events WHERE timestamp >= 3000 AND timestamp < 4000")).toBe(20)
  })

  it("lets a sender that can wait queue beyond maxPending, up to maxWaiting", async () => {
    const writer = makeWriter(sql, { maxBatch: 10, maxPending: 5, maxWaiting: 15 })
    const results: Array<Promise<Exit.Exit<void, unknown>>> = []
    let taken = 0
    for (let i = 0; i < 30; i++) {
      const item = event(4_000 + i)
      let answer: (exit: Exit.Exit<void, unknown>) => void = () => {}
      const result = new Promise<Exit.Exit<void, unknown>>((resolve) => (answer = resolve))
      if (writer.service.submit(item, answer, true)) {
        taken += 1
        results.push(result)
      }
    }
    expect(taken).toBe(15)
    // The others are still refused at maxPending.
    expect(await Effect.runPromiseExit(writer.service.write(event(4_100)))).toSatisfy(Exit.isFailure)
    expect((await Promise.all(results)).every(Exit.isSuccess)).toBe(true)
    expect(await count("events WHERE timestamp >= 4000 AND timestamp < 5000")).toBe(15)
  })

  it("writes two batches at once, answers them in order, and does not deadlock on shared devices", async () => {
    const writer = makeWriter(sql, { maxBatch: 50, maxPending: 10_000, maxFlushes: 2 })
    const order: Array<number> = []
    const items = Array.from({ length: 1_000 }, (_, i) => event(5_000 + i, i % 2 === 0 ? "dev_w" : "dev_w2"))
    // Submitted over several turns so that batches overlap.
    const done: Array<Promise<void>> = []
    for (let turn = 0; turn < 10; turn++) {
      for (const [i, item] of items.slice(turn * 100, turn * 100 + 100).entries()) {
        const index = turn * 100 + i
        done.push(new Promise<void>((resolve, reject) => {
          writer.service.submit(item, (exit) => {
            order.push(index)
            return Exit.isSuccess(exit) ? resolve() : reject(new Error(String(exit.cause)))
          })
        }))
      }
      await new Promise((resolve) => setImmediate(resolve))
    }
    await Promise.all(done)
    expect(order).toEqual(items.map((_, i) => i))
    expect(await count("events WHERE timestamp >= 5000 AND timestamp < 6000")).toBe(1_000)
    await writer.close()
    expect(writer.service.pending()).toBe(0)
  })

  it("stores data as sent: JSON null, no data, strings and names that need escaping", async () => {
    const writer = makeWriter(sql)
    const row = (id: string, data: string | null, name: string): WriteItem => ({
      _tag: "event",
      row: { id, organisationId: "org_w", deviceId: "dev_w2", name, data, timestamp: 7_000, receivedAt: 7_000, protocol: "mqtt" }
    })
    await Promise.all([
      Effect.runPromise(writer.service.write(row("evt_d1", "null", "plain"))),
      Effect.runPromise(writer.service.write(row("evt_d2", null, "quote\"back\\slash"))),
      Effect.runPromise(writer.service.write(row("evt_d3", JSON.stringify({ s: "a\"b\\c\n", n: [1.5, -2e300], u: "é€😀" }), "ünï")))
    ])
    const rows = await Effect.runPromise(sql.query<{ id: string; name: string; kind: string | null; data: unknown }>(
      "SELECT id, name, jsonb_typeof(data) AS kind, data FROM events WHERE id LIKE 'evt_d%' ORDER BY id"
    ))
    expect(rows.map((r) => [r.id, r.name, r.kind])).toEqual([
      ["evt_d1", "plain", "null"],
      ["evt_d2", "quote\"back\\slash", null],
      ["evt_d3", "ünï", "object"]
    ])
    expect(rows[2].data).toEqual({ s: "a\"b\\c\n", n: [1.5, -2e300], u: "é€😀" })
  })

  it("stores a batch large enough for PGlite's COPY exactly as batches of one statement store it", async () => {
    const awkward: ReadonlyArray<readonly [string, string | null]> = [
      ["plain", "null"],
      ["tab\there", null],
      ["line\nend\r\nand back\\slash \\N", "{\n\t\"a\": \"x\\\\y\\n\",\r\n \"b\": [1.5, -2e300, null]}"],
      ["ünï €😀", JSON.stringify({ s: "a\"b\\c\t\n", u: "é€😀" })],
      ["\\.", "\"\\\\.\""]
    ]
    const rows = (prefix: string, n: number): Array<WriteItem> =>
      Array.from({ length: n }, (_, i): WriteItem => {
        const [name, data] = awkward[i % awkward.length]
        return {
          _tag: "event",
          row: { id: `${prefix}${String(i).padStart(5, "0")}`, organisationId: "org_w", deviceId: i % 2 === 0 ? "dev_wc1" : "dev_wc2", name, data, timestamp: 9_000 + i, receivedAt: 90_000 + i, protocol: "mqtt" }
        }
      })
    await Effect.runPromise(sql.exec(`
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_wc1', 'org_w', 'hc1', 'c1', 1, 1);
      INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_wc2', 'org_w', 'hc2', 'c2', 1, 1);
    `))
    const n = COPY_EVENTS_FROM_ROWS + 7
    await Effect.runPromise(writeRetried(sql, rows("evt_big", n), 0))
    const [seen] = await Effect.runPromise(sql.query<{ last: string }>("SELECT max(last_seen_at)::text AS last FROM device_seen WHERE device_id IN ('dev_wc1', 'dev_wc2')"))
    expect(seen.last).toBe(String(90_000 + n - 1))
    for (const item of rows("evt_one", n)) await Effect.runPromise(writeRetried(sql, [item], 0))
    const stored = (prefix: string) =>
      Effect.runPromise(sql.query<Record<string, unknown>>(
        `SELECT substr(id, ${prefix.length + 1}) AS n, device_id, name, data::text AS data, jsonb_typeof(data) AS kind, timestamp::text, received_at::text, protocol
           FROM events WHERE id LIKE '${prefix}%' ORDER BY id`
      ))
    const big = await stored("evt_big")
    expect(big).toHaveLength(n)
    expect(big).toEqual(await stored("evt_one"))
    expect(big.slice(0, 5).map((r) => [r.name, r.kind])).toEqual(awkward.map(([name, data]) => [name, data === null ? null : data === "null" ? "null" : expect.any(String)]))
  })

  it("writes locations and command runs in the same batches", async () => {
    const writer = makeWriter(sql)
    await Effect.runPromise(sql.query(
      "INSERT INTO commands (id, organisation_id, device_id, name, slug, created_at, updated_at) VALUES ('cmd_w', 'org_w', 'dev_w', 'c', 'c', 1, 1) ON CONFLICT DO NOTHING"
    ))
    await Promise.all([
      Effect.runPromise(writer.service.write({
        _tag: "location",
        row: { id: "loc_w1", organisationId: "org_w", deviceId: "dev_w", latitude: "1.25", longitude: "-2.5", altitude: null, timestamp: 1, receivedAt: 5_000, protocol: "mqtt" }
      })),
      Effect.runPromise(writer.service.write({
        _tag: "run",
        row: { id: "cmd_run1", organisationId: "org_w", commandId: "cmd_w", deviceId: "dev_w", data: "{\"x\":1}", timestamp: 1, protocol: "http" }
      }))
    ])
    const [loc] = await Effect.runPromise(sql.query<{ latitude: string }>("SELECT latitude::text AS latitude FROM locations WHERE id = 'loc_w1'"))
    expect(loc.latitude).toBe("1.25")
    const [run] = await Effect.runPromise(sql.query<{ data: unknown }>("SELECT data FROM command_runs WHERE id = 'cmd_run1'"))
    expect(run.data).toEqual({ x: 1 })
  })

  it("writes batches of command runs alone (one statement each), a run of a command gone failing alone", async () => {
    const writer = makeWriter(sql)
    await Effect.runPromise(sql.query(
      "INSERT INTO commands (id, organisation_id, device_id, name, slug, created_at, updated_at) VALUES ('cmd_w', 'org_w', 'dev_w', 'c', 'c', 1, 1) ON CONFLICT DO NOTHING"
    ))
    const run = (id: string, commandId: string) =>
      Effect.runPromiseExit(writer.service.write({
        _tag: "run",
        row: { id, organisationId: "org_w", commandId, deviceId: "dev_w", data: null, timestamp: 2, protocol: "mqtt" }
      }))
    // The first goes at once, alone; the rest wait for it and go together.
    const exits = await Promise.all([run("cmd_run2", "cmd_w"), run("cmd_run3", "cmd_w"), run("cmd_run4", "cmd_gone"), run("cmd_run5", "cmd_w")])
    expect(exits.map(Exit.isSuccess)).toEqual([true, true, false, true])
    const refused = exits[2]
    expect(Exit.isFailure(refused) && refused.cause.reasons.some((r) => r._tag === "Fail" && r.error._tag === "SqlError" && r.error.code === "23503")).toBe(true)
    const rows = await Effect.runPromise(sql.query<{ id: string; data: unknown }>("SELECT id, data FROM command_runs WHERE id IN ('cmd_run2', 'cmd_run3', 'cmd_run4', 'cmd_run5') ORDER BY id"))
    expect(rows).toEqual([{ id: "cmd_run2", data: null }, { id: "cmd_run3", data: null }, { id: "cmd_run5", data: null }])
  })
})
