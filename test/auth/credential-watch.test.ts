import { ConfigProvider, Context, type Duration, Effect, Exit, Layer, Logger, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Auth } from "../../src/auth/Auth.ts"
import { type CredentialWatch, watchCredentials } from "../../src/auth/CredentialWatch.ts"
import { hashSecret } from "../../src/auth/secrets.ts"
import { Bus, type BusService } from "../../src/bus/Bus.ts"
import { migrate } from "../../src/store/migrate.ts"
import { Sql, type SqlClient, SqlError } from "../../src/store/Sql.ts"
import { openTestStore, STORE_KINDS, type TestStore } from "../support/databases.ts"

/** Waits (at most 5 s) for `condition`, naming it when it never holds. */
const until = async (condition: () => boolean, what: string) => {
  const deadline = Date.now() + 5_000
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

const setUp = (sql: SqlClient) =>
  sql.exec(`
    INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_c', 'c', 1, 1);
    INSERT INTO users (id, email_address, created_at, updated_at) VALUES ('usr_c', 'c@example.com', 1, 1);
    INSERT INTO organisation_users (id, organisation_id, user_id, created_at, updated_at) VALUES ('ou_c', 'org_c', 'usr_c', 1, 1);
    INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_c', 'org_c', 'h1', 'c', 1, 1);
  `)

describe.each(STORE_KINDS)("the credential change counter on %s", (kind) => {
  let store: TestStore
  let sql: SqlClient
  const version = async () =>
    Number((await Effect.runPromise(sql.query<{ version: string }>("SELECT version::text AS version FROM credential_changes")))[0].version)
  /** How far the counter moved over `statements`. */
  const moves = async (statements: string) => {
    const before = await version()
    await Effect.runPromise(sql.exec(statements))
    return (await version()) - before
  }

  beforeAll(async () => {
    store = await openTestStore(kind)
    sql = store.sql
    await Effect.runPromise(setUp(sql))
  })
  afterAll(() => store.close())

  it("moves when a credential ends or changes, whoever writes it", async () => {
    expect(await moves("INSERT INTO api_keys (id, organisation_id, secret_hash, secret_hint, created_at, updated_at) VALUES ('key_c', 'org_c', 'k1', 'k', 1, 1)"))
      .toBe(0)
    expect(await moves("UPDATE api_keys SET read_only = true WHERE id = 'key_c'")).toBe(1)
    expect(await moves("DELETE FROM api_keys WHERE id = 'key_c'")).toBe(1)
    expect(await moves("UPDATE devices SET secret_hash = 'h2' WHERE id = 'dev_c'")).toBe(1)
    expect(
      await moves(`INSERT INTO user_tokens (id, token_hash, refresh_hash, user_id, organisation_user_id, organisation_id, scope, expires_at, created_at)
                   VALUES ('tok_c', 't1', 'r1', 'usr_c', 'ou_c', 'org_c', 'all', 9999999999999, 1)`)
    ).toBe(0)
    expect(await moves("UPDATE user_tokens SET revoked_at = 5 WHERE id = 'tok_c'")).toBe(1)
    expect(await moves("UPDATE organisation_users SET is_admin = true WHERE id = 'ou_c'")).toBe(1)
    // The user goes with its membership; its token, the membership and the user each count.
    expect(await moves("DELETE FROM organisation_users WHERE id = 'ou_c'; DELETE FROM users WHERE id = 'usr_c'")).toBeGreaterThan(0)
    expect(await moves("DELETE FROM devices WHERE id = 'dev_c'")).toBe(1)
  })

  it("stays put for traffic and for writes that change no credential", async () => {
    await Effect.runPromise(sql.exec("INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) VALUES ('dev_d', 'org_c', 'hd', 'd', 1, 1)"))
    expect(await moves("UPDATE devices SET name = 'renamed', updated_at = 2 WHERE id = 'dev_d'")).toBe(0)
    expect(await moves("UPDATE devices SET secret_hash = 'hd' WHERE id = 'dev_d'")).toBe(0)
    expect(await moves("UPDATE devices SET secret_hash = 'none' WHERE id = 'no such device'")).toBe(0)
  })

  it("counts a change only once it commits", async () => {
    const before = await version()
    let inside = -1
    await Effect.runPromise(sql.transaction((tx) =>
      Effect.gen(function*() {
        yield* tx.query("UPDATE devices SET secret_hash = 'hd2' WHERE id = 'dev_d'")
        inside = Number((yield* tx.query<{ version: string }>("SELECT version::text AS version FROM credential_changes"))[0].version)
      })
    ))
    expect(inside).toBe(before)
    expect(await version()).toBe(before + 1)
  })
})

describe("watching the counter", () => {
  let scope: Scope.Closeable
  let sql: SqlClient
  let bus: BusService
  let storeDown = false
  let reads = 0
  /** The store as the watch sees it: down while `storeDown`. */
  const flaky: SqlClient = {
    dialect: "pglite",
    query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
      Effect.suspend(() => {
        reads += 1
        return storeDown ? Effect.fail(new SqlError({ message: "connection terminated", cause: undefined })) : sql.query<T>(text, params)
      }),
    exec: (text) => sql.exec(text),
    write: (text, params) => sql.write(text, params),
    transaction: (f) => sql.transaction(f),
    script: (steps) => sql.script(steps)
  }
  const logs: Array<{ level: string; message: string }> = []
  const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
    const parts = Array.isArray(message) ? message : [message]
    logs.push({ level: logLevel, message: parts.map(String).join(" ") })
  })

  const rotate = () => Effect.runPromise(sql.exec("UPDATE devices SET secret_hash = md5(random()::text) WHERE id = 'dev_c'"))
  /** A watch on a scope of its own, counting its applies; `failures` of them fail first. */
  const watch = async (every: Duration.Input, failures = 0) => {
    const counts = { applied: 0, attempted: 0 }
    const watchScope = await Effect.runPromise(Scope.make())
    const apply = Effect.suspend(() => {
      counts.attempted += 1
      if (counts.attempted <= failures) return Effect.fail(new SqlError({ message: "re-check failed", cause: undefined }))
      counts.applied += 1
      return Effect.void
    })
    const made: CredentialWatch = await Effect.runPromise(
      watchCredentials({ every, apply }).pipe(
        Effect.provideService(Sql, flaky),
        Effect.provideService(Bus, bus),
        Effect.provideService(Scope.Scope, watchScope),
        Effect.provide(Logger.layer([capture]))
      )
    )
    scopes.push(watchScope)
    return { counts, changedHere: () => Effect.runPromise(made.changedHere) }
  }
  const scopes: Array<Scope.Closeable> = []

  beforeAll(async () => {
    scope = await Effect.runPromise(Scope.make())
    const context = await Effect.runPromise(Layer.buildWithScope(Layer.mergeAll(Sql.layer({ _tag: "pglite", dataDir: undefined }), Bus.memory), scope))
    sql = Context.get(context, Sql)
    bus = Context.get(context, Bus)
    await Effect.runPromise(Effect.provideService(migrate, Sql, sql))
    await Effect.runPromise(setUp(sql))
  })
  afterAll(async () => {
    for (const s of scopes) await Effect.runPromise(Scope.close(s, Exit.void))
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  it("keeps polling through store errors, logs them once, and applies the change made meanwhile", async () => {
    logs.length = 0
    const { counts } = await watch("20 millis")
    await until(() => counts.applied === 1, "the first check")
    storeDown = true
    try {
      const readsWhenDown = reads
      await rotate()
      await until(() => reads >= readsWhenDown + 5, "five polls while the store is down")
      expect(counts.applied).toBe(1)
    } finally {
      storeDown = false
    }
    await until(() => counts.applied === 2, "the change to be applied once the store answers")
    expect(logs.filter((l) => l.message.startsWith("credential changes not applied: connection terminated"))).toHaveLength(1)
    expect(logs.map((l) => l.message)).toContain("credential changes applied again")
  })

  it("applies a change again at the next poll when its re-check failed", async () => {
    const { counts } = await watch("20 millis", 1)
    await until(() => counts.applied === 1, "the check after the failed one")
    expect(counts.attempted).toBe(2)
  })

  it("looks at once on a bus notice, and applies a change made here even with the store down", async () => {
    const { counts, changedHere } = await watch("1 hour")
    await until(() => counts.applied === 1, "the first check")
    await rotate()
    // Another process's notice: the poll would not come for an hour.
    await Effect.runPromise(bus.control({ type: "credentials.changed" }))
    await until(() => counts.applied === 2, "the change to be applied on the notice")
    storeDown = true
    try {
      await changedHere()
      await until(() => counts.applied === 3, "the change made here to be applied")
    } finally {
      storeDown = false
    }
  })
})

/** A migrated in-memory PGlite with the test organisation and an application key `id` for `key`, and a bus. */
const storeWithKey = async (scope: Scope.Closeable, id: string, key: string) => {
  const context = await Effect.runPromise(Layer.buildWithScope(Layer.mergeAll(Sql.layer({ _tag: "pglite", dataDir: undefined }), Bus.memory), scope))
  const sql = Context.get(context, Sql)
  await Effect.runPromise(Effect.provideService(migrate, Sql, sql))
  await Effect.runPromise(setUp(sql))
  await Effect.runPromise(sql.query(
    "INSERT INTO api_keys (id, organisation_id, secret_hash, secret_hint, created_at, updated_at) VALUES ($1, 'org_c', $2, 'r', 1, 1)",
    [id, hashSecret(key)]
  ))
  return { sql, bus: Context.get(context, Bus) }
}

/** Auth over `sql` (the store's client, wrapped by the test), its change check left to notices. */
const authOver = async (scope: Scope.Closeable, layer: typeof Auth.layer, sql: SqlClient, bus: BusService) =>
  Context.get(
    await Effect.runPromise(Layer.buildWithScope(
      layer.pipe(
        Layer.provide(Layer.mergeAll(Layer.succeed(Sql, sql), Layer.succeed(Bus, bus))),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord({ CREDENTIAL_CHECK_INTERVAL: "1 hour" })))
      ),
      scope
    )),
    Auth
  )

describe("a credential looked up in the store", () => {
  let scope: Scope.Closeable
  beforeAll(async () => {
    scope = await Effect.runPromise(Scope.make())
  })
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

  it("is looked up again, so an answer read before the change is neither used nor cached", async () => {
    const key = "a_sk_looked_up_during_a_change_0123456789"
    const { sql, bus } = await storeWithKey(scope, "key_r", key)
    // The key's first lookup is answered by the store, then held until the key is deleted.
    let hold: (() => void) | undefined
    const held = new Promise<void>((resolve) => {
      hold = resolve
    })
    let lookups = 0
    const slow: SqlClient = {
      ...sql,
      query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
        text.includes("FROM api_keys k")
          ? Effect.tap(sql.query<T>(text, params), () => (++lookups === 1 ? Effect.promise(() => held) : Effect.void))
          : sql.query<T>(text, params)
    }
    const auth = await authOver(scope, Auth.layer, slow, bus)
    const answer = Effect.runPromise(Effect.flip(auth.authenticate(key)))
    await until(() => lookups === 1, "the first lookup")
    await Effect.runPromise(sql.query("DELETE FROM api_keys WHERE id = 'key_r'"))
    await Effect.runPromise(auth.forget())
    hold?.()
    expect((await answer)._tag).toBe("Unauthorized")
    expect(lookups).toBeGreaterThan(1)
  })

  it("in use is looked up again ahead of its entry's end: answered from the cache meanwhile, renewed, or dropped when gone", async () => {
    const key = "a_sk_refreshed_ahead_of_its_end_0123456789"
    const { sql, bus } = await storeWithKey(scope, "key_a", key)
    // Lookups are held, while `holding`, until `release`.
    let lookups = 0
    let holding = false
    let release: (() => void) | undefined
    const held = new Promise<void>((resolve) => {
      release = resolve
    })
    const slow: SqlClient = {
      ...sql,
      query: <T>(text: string, params?: ReadonlyArray<unknown>) =>
        text.includes("FROM api_keys k")
          ? Effect.tap(sql.query<T>(text, params), () => {
            lookups++
            return holding ? Effect.promise(() => held) : Effect.void
          })
          : sql.query<T>(text, params)
    }
    // Trusted 10 s, looked up again in its last 9.9 s: every call after the first 100 ms refreshes.
    const auth = await authOver(scope, Auth.layerWith({ ttlMs: 10_000, refreshAheadMs: 9_900 }), slow, bus)
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
    const organisationOf = async () => (await Effect.runPromise(auth.authenticate(key))).organisationId
    expect(await organisationOf()).toBe("org_c")
    // Once more, unheld: whatever the watch's first check cleared is cached again.
    await sleep(150)
    expect(await organisationOf()).toBe("org_c")
    await until(() => lookups >= 2, "the second lookup")
    await sleep(150)

    // Its lookup held, the key is answered anyway; one lookup for many requests.
    holding = true
    const before = lookups
    expect(await organisationOf()).toBe("org_c")
    expect(await organisationOf()).toBe("org_c")
    await until(() => lookups === before + 1, "the refresh's lookup")
    expect(await organisationOf()).toBe("org_c")
    expect(lookups).toBe(before + 1)

    // The key goes (no notice: a lookup must find it out). The held lookup read it before: renewed.
    await Effect.runPromise(sql.query("DELETE FROM api_keys WHERE id = 'key_a'"))
    holding = false
    release?.()
    await sleep(150)
    // The next refresh finds it gone and drops it: refused from then on, without waiting 10 s.
    let refused = false
    const deadline = Date.now() + 5_000
    while (!refused && Date.now() < deadline) {
      refused = Exit.isFailure(await Effect.runPromiseExit(auth.authenticate(key)))
      if (!refused) await sleep(20)
    }
    expect(refused).toBe(true)
    expect(Exit.isFailure(await Effect.runPromiseExit(auth.authenticate(key)))).toBe(true)
  })
})
