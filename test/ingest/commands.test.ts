import { Context, Effect, Exit, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Bus, type Delivery } from "../../src/bus/Bus.ts"
import { COMMAND_TTL_MS, makeCommandDirectory } from "../../src/ingest/commands.ts"
import { Sql } from "../../src/store/Sql.ts"
import { BOOTSTRAP_KEY, startApp, type TestApp } from "../support/app.ts"
import { startCore, type TestCore } from "../support/core.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"
import { until } from "../support/eventually.ts"

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

/**
 * Runs find their command in a per-process directory instead of the store: whatever renames,
 * deletes or replaces a command must still show in the next run, here and in other processes.
 */
describe.each(STORE_KINDS)("command runs from held commands on %s", (kind) => {
  let t: TestCore
  let deviceId: string
  const deliveries: Array<Delivery> = []
  let scope: Scope.Closeable
  const call = (method: string, path: string, body?: unknown) => t.call(method, path, body)
  const query = (text: string, params: ReadonlyArray<unknown>) => t.run(Sql.use((sql) => sql.query(text, params)))
  const runs = async (commandId: string) => (await query("SELECT count(*)::int AS n FROM command_runs WHERE command_id = $1", [commandId]))[0] as { n: number }

  beforeAll(async () => {
    t = await startCore(kind)
    scope = Effect.runSync(Scope.make())
    await t.run(Bus.use((bus) => bus.onDelivery((d) => deliveries.push(d))).pipe(Scope.provide(scope)))
    const space = (await call("POST", "/spaces", { name: "Plant" })).body.id
    deviceId = (await call("POST", "/devices", { name: "valve", space: { id: space } })).body.id
    expect(deviceId).toMatch(/^dev_/)
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await t.close()
  })

  it("a renamed command runs by its new slug only, delivered on its new topic", async () => {
    const cmd = (await call("POST", "/commands", { name: "Open", device: { id: deviceId } })).body
    expect((await call("POST", "/commands/run", { slug: "open", device: { id: deviceId } })).status).toBe(200)
    expect((await call("PUT", `/commands/${cmd.id}`, { slug: "open-wide" })).status).toBe(200)
    const old = await call("POST", "/commands/run", { slug: "open", device: { id: deviceId } })
    expect(old.status).toBe(404)
    const byId = await call("POST", "/commands/run", { id: cmd.id, data: 1 })
    expect(byId.body.slug).toBe("open-wide")
    const run = await call("POST", "/commands/run", { slug: "open-wide", device: { id: deviceId }, data: 2 })
    expect(run.status).toBe(200)
    expect(run.body.command.id).toBe(cmd.id)
    const last = deliveries.filter((d) => d.deviceId === deviceId).at(-1)
    expect(last?.topic).toBe(`devices/${deviceId}/commands/open-wide/run`)
    expect(JSON.parse(last!.payload).data).toBe(2)
    expect((await runs(cmd.id)).n).toBe(3)
  })

  it("a command deleted and made again with the same slug runs as the new one", async () => {
    const first = (await call("POST", "/commands", { name: "Close", device: { id: deviceId } })).body
    expect((await call("POST", "/commands/run", { slug: "close", device: { id: deviceId } })).body.command.id).toBe(first.id)
    expect((await call("DELETE", `/commands/${first.id}`)).status).toBe(200)
    expect((await call("POST", "/commands/run", { slug: "close", device: { id: deviceId } })).status).toBe(404)
    expect((await call("POST", "/commands/run", { id: first.id })).status).toBe(404)
    const second = (await call("POST", "/commands", { name: "Close", device: { id: deviceId } })).body
    const run = await call("POST", "/commands/run", { slug: "close", device: { id: deviceId } })
    expect(run.body.command.id).toBe(second.id)
    expect((await runs(second.id)).n).toBe(1)
  })

  it("a held command replaced behind its back (no notice) is found again, and one only deleted is 404 with nothing stored", async () => {
    const held = (await call("POST", "/commands", { name: "Flush", device: { id: deviceId } })).body
    expect((await call("POST", "/commands/run", { slug: "flush", device: { id: deviceId } })).body.command.id).toBe(held.id)
    // As another process whose notice was lost would leave it: the row replaced, nothing told.
    await query("DELETE FROM commands WHERE id = $1", [held.id])
    const replacement = (await call("POST", "/commands", { name: "Flush", device: { id: deviceId } })).body
    const run = await call("POST", "/commands/run", { slug: "flush", device: { id: deviceId }, data: "again" })
    expect(run.status).toBe(200)
    expect(run.body.command.id).toBe(replacement.id)
    expect((await runs(replacement.id)).n).toBe(1)

    const gone = (await call("POST", "/commands", { name: "Drain", device: { id: deviceId } })).body
    expect((await call("POST", "/commands/run", { id: gone.id })).status).toBe(200)
    await query("DELETE FROM commands WHERE id = $1", [gone.id])
    const before = deliveries.length
    const refused = await call("POST", "/commands/run", { id: gone.id })
    expect(refused.status).toBe(404)
    expect(refused.body.error.message).toContain(gone.id)
    expect(deliveries.length).toBe(before)
    expect((await runs(gone.id)).n).toBe(0)
  })

  it("a deleted device's held commands are gone", async () => {
    const space = (await call("POST", "/spaces", { name: "Pumps" })).body.id
    const device = (await call("POST", "/devices", { name: "pump", space: { id: space } })).body
    const cmd = (await call("POST", "/commands", { name: "Stop", device: { id: device.id } })).body
    expect((await call("POST", "/commands/run", { slug: "stop", device: { id: device.id } })).status).toBe(200)
    expect((await call("DELETE", `/devices/${device.id}`)).status).toBe(200)
    expect((await call("POST", "/commands/run", { id: cmd.id })).status).toBe(404)
    expect((await call("POST", "/commands/run", { slug: "stop", device: { id: device.id } })).status).toBe(404)
  })

  it("the directory: re-reads after the TTL, keeps organisations apart, forgets an organisation", async () => {
    let now = 1_000
    const directory = makeCommandDirectory(Context.get(t.context, Sql), () => now)
    const cmd = (await call("POST", "/commands", { name: "Tick", device: { id: deviceId } })).body
    const organisationId = ((await query("SELECT organisation_id FROM commands WHERE id = $1", [cmd.id]))[0] as { organisation_id: string }).organisation_id
    const found = await Effect.runPromise(directory.bySlug(organisationId, deviceId, "tick"))
    expect(found).toEqual({ id: cmd.id, slug: "tick", deviceId, organisationId, readAt: 1_000 })
    // Held: a change the directory was not told of does not show…
    await query("UPDATE commands SET slug = 'tock' WHERE id = $1", [cmd.id])
    expect((await Effect.runPromise(directory.bySlug(organisationId, deviceId, "tick")))?.id).toBe(cmd.id)
    expect((await Effect.runPromise(directory.byId(organisationId, cmd.id)))?.slug).toBe("tick")
    // …another organisation never gets it from the directory…
    expect(await Effect.runPromise(directory.byId("org_other", cmd.id))).toBeUndefined()
    // …and past the TTL it is read again.
    now += COMMAND_TTL_MS + 1
    expect(await Effect.runPromise(directory.bySlug(organisationId, deviceId, "tick"))).toBeUndefined()
    expect((await Effect.runPromise(directory.byId(organisationId, cmd.id)))?.slug).toBe("tock")
    await query("UPDATE commands SET slug = 'tick' WHERE id = $1", [cmd.id])
    directory.forgetOrganisation(organisationId)
    expect((await Effect.runPromise(directory.byId(organisationId, cmd.id)))?.slug).toBe("tick")
    expect((await Effect.runPromise(directory.bySlug(organisationId, deviceId, "tock")))).toBeUndefined()
  })
})

describe("held commands across two processes on NATS and Postgres", () => {
  let db: TestDatabase
  let one: TestApp
  let two: TestApp
  beforeAll(async () => {
    db = await createPostgresDatabase()
    one = await startApp({ DATABASE_URL: db.url, NATS_URL }, { listen: true })
    two = await startApp({ DATABASE_URL: db.url, NATS_URL }, { listen: true })
  })
  afterAll(async () => {
    await one?.close()
    await two?.close()
    await db?.drop()
  })

  it("a command renamed on one process no longer runs by its old slug on the other", async () => {
    const space = (await one.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Yard" } })).body.id
    const device = (await one.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "gate", space: { id: space } } })).body
    const cmd = (await one.call("POST", "/commands", { key: BOOTSTRAP_KEY, body: { name: "Lift", device: { id: device.id } } })).body
    const runOn = (app: TestApp, slug: string) => app.call("POST", "/commands/run", { key: BOOTSTRAP_KEY, body: { slug, device: { id: device.id } } })
    const first = await runOn(two, "lift")
    expect(first.body).toMatchObject({ command: { id: cmd.id } })
    expect((await one.call("PUT", `/commands/${cmd.id}`, { key: BOOTSTRAP_KEY, body: { slug: "raise" } })).status).toBe(200)
    await until(async () => (await runOn(two, "lift")).status === 404, 2_000, "the rename on the other process")
    const run = await runOn(two, "raise")
    expect(run.status).toBe(200)
    expect(run.body.command.id).toBe(cmd.id)
  })
})
