import { Effect, Exit, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Bus, type Delivery } from "../../src/bus/Bus.ts"
import { AlertBucket, alertBucketOf, type AlertIntent, Space } from "../../src/entities/protocol.ts"
import { Sql } from "../../src/store/Sql.ts"
import { webhookReceiver } from "../notify/support.ts"
import { startCore, type TestCore } from "../support/core.ts"
import { STORE_KINDS } from "../support/databases.ts"
import { eventually } from "../support/eventually.ts"

interface Row {
  id: string
  state: string
  first_seen_at: number
  last_seen_at: number
  acknowledged_at: number | null
  resolved_at: number | null
  updated_at: number
  notifications: Array<{ channel: string; status: string }>
}

/** The AlertBucket entity through the real cluster (a single runner on PGlite, an HTTP runner on Postgres). */
describe.each(STORE_KINDS)("the AlertBucket entity on %s", (kind) => {
  let t: TestCore
  let webhook: Awaited<ReturnType<typeof webhookReceiver>>
  const scope = Effect.runSync(Scope.make())
  const deliveries: Array<Delivery> = []
  beforeAll(async () => {
    // The first notification hangs: the entity must not wait for it.
    webhook = await webhookReceiver(["hang", 200])
    t = await startCore(kind)
    await t.run(Bus.use((bus) => bus.onDelivery((d) => deliveries.push(d))).pipe(Scope.provide(scope)))
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await t?.close()
    await webhook?.close()
  })

  const query = <T>(text: string, params: ReadonlyArray<unknown> = []) => t.run(Sql.use((sql) => sql.query<T>(text, params)))
  const rowsOf = (ruleId: string, deviceId: string) =>
    query<Row>("SELECT * FROM alerts WHERE alert_rule_id = $1 AND device_id = $2 ORDER BY created_at", [ruleId, deviceId])
  const published = (deviceId: string) =>
    deliveries.filter((d) => d.deviceId === deviceId).map((d) => JSON.parse(d.payload) as { id: string; state: string; lastSeenAt: number })
  const entity = (deviceId: string) => Effect.map(AlertBucket.client, (client) => client(alertBucketOf(deviceId)))
  let organisationId = ""
  const raising = (ruleId: string, deviceId: string, at: number): AlertIntent => ({
    kind: "raise",
    ruleId,
    deviceId,
    organisationId,
    at,
    note: "too hot",
    event: { id: `evt_${at}`, name: "t", data: { v: at }, timestamp: at },
    autoResolve: false
  })
  const clearing = (ruleId: string, deviceId: string, at: number, autoResolve = true): AlertIntent => ({
    kind: "clear",
    ruleId,
    deviceId,
    organisationId,
    at,
    note: "",
    event: null,
    autoResolve
  })
  const apply = (deviceId: string, intents: ReadonlyArray<AlertIntent>) =>
    t.run(Effect.flatMap(entity(deviceId), (alert) => alert.Apply({ intents })))
  const raise = (ruleId: string, deviceId: string, _why: string, at: number) => apply(deviceId, [raising(ruleId, deviceId, at)])
  const clear = (ruleId: string, deviceId: string, _why: string, at: number) => apply(deviceId, [clearing(ruleId, deviceId, at)])
  const resolve = (ruleId: string, deviceId: string, alertId: string, at: number) =>
    t.run(Effect.flatMap(entity(deviceId), (alert) => alert.Resolve({ alertId, ruleId, deviceId, at })))
  const acknowledge = (ruleId: string, deviceId: string, alertId: string, at: number) =>
    t.run(Effect.flatMap(entity(deviceId), (alert) => alert.Acknowledge({ alertId, ruleId, deviceId, at })))
  const openCount = (spaceId: string) => t.run(Effect.flatMap(Space.client, (client) => client(spaceId).GetSpace())).then((s) => s.openAlerts)
  const openCountBecomes = (spaceId: string, n: number) =>
    eventually(async () => ((await openCount(spaceId)) === n ? n : undefined), 3_000, `${n} open alerts in the space`)

  /** A space with a device, and a rule that raises nothing by itself (alerts come from this test's messages). */
  const slot = async (autoResolve: boolean, template?: string) => {
    const space = (await t.call("POST", "/spaces", { name: "S" })).body as { id: string }
    const device = (await t.call("POST", "/devices", { name: "d", space: { id: space.id } })).body as { id: string }
    const rule = (await t.call("POST", "/alertRules", {
      name: "r",
      type: "threshold",
      severity: "low",
      autoResolve,
      space: { id: space.id },
      ...(template === undefined ? {} : { notificationTemplate: { id: template } }),
      config: { eventName: "never-sent", max: 1 }
    })).body as { id: string; organisation: { id: string } }
    organisationId = rule.organisation.id
    return { spaceId: space.id, deviceId: device.id, ruleId: rule.id }
  }

  it("opens an alert on a raise, repeats it on a later one, and does nothing for a raise it applied already", async () => {
    const { spaceId, deviceId, ruleId } = await slot(false)
    await raise(ruleId, deviceId, "k1", 1_000)
    const [opened] = await rowsOf(ruleId, deviceId)
    expect(opened).toMatchObject({ state: "unresolved", first_seen_at: 1_000, last_seen_at: 1_000, resolved_at: null })
    const [row] = await query<{ event_name: string; note: string }>("SELECT event_name, note FROM alerts WHERE id = $1", [opened.id])
    expect(row).toEqual({ event_name: "t", note: "too hot" })
    expect(published(deviceId).map((a) => a.state)).toEqual(["unresolved"])
    await openCountBecomes(spaceId, 1)

    await raise(ruleId, deviceId, "k2", 2_000)
    const [repeated] = await rowsOf(ruleId, deviceId)
    expect(repeated).toMatchObject({ id: opened.id, last_seen_at: 2_000 })

    // The same raise again (a step run again after a crash), and an older raise: nothing changes.
    await raise(ruleId, deviceId, "k2", 2_000)
    await raise(ruleId, deviceId, "k2-again", 2_000)
    await raise(ruleId, deviceId, "k0", 1_500)
    expect(await rowsOf(ruleId, deviceId)).toEqual([repeated])
    expect(published(deviceId).map((a) => a.lastSeenAt)).toEqual([1_000, 2_000])
    expect(await openCount(spaceId)).toBe(1)
  })

  it("resolves the open alert on a clear when its rule auto-resolves, and leaves it open otherwise", async () => {
    const auto = await slot(true)
    await raise(auto.ruleId, auto.deviceId, "r", 1_000)
    await openCountBecomes(auto.spaceId, 1)
    // A clear older than the alert is about an earlier condition.
    await clear(auto.ruleId, auto.deviceId, "c0", 500)
    expect((await rowsOf(auto.ruleId, auto.deviceId))[0].resolved_at).toBeNull()
    await clear(auto.ruleId, auto.deviceId, "c1", 3_000)
    await clear(auto.ruleId, auto.deviceId, "c2", 4_000)
    const [resolved] = await rowsOf(auto.ruleId, auto.deviceId)
    expect(resolved).toMatchObject({ state: "resolved", resolved_at: 3_000 })
    await openCountBecomes(auto.spaceId, 0)
    expect(published(auto.deviceId).map((a) => a.state)).toEqual(["unresolved", "resolved"])
    // A new occurrence opens a new alert.
    await raise(auto.ruleId, auto.deviceId, "r2", 5_000)
    expect((await rowsOf(auto.ruleId, auto.deviceId)).map((r) => r.state)).toEqual(["resolved", "unresolved"])

    const manual = await slot(false)
    await raise(manual.ruleId, manual.deviceId, "r", 1_000)
    await apply(manual.deviceId, [clearing(manual.ruleId, manual.deviceId, 2_000, false)])
    expect((await rowsOf(manual.ruleId, manual.deviceId))[0]).toMatchObject({ state: "unresolved", resolved_at: null })
  })

  it("acknowledges and resolves by id: once, idempotently, and only an alert of its own slot", async () => {
    const { spaceId, deviceId, ruleId } = await slot(false)
    await raise(ruleId, deviceId, "r", 1_000)
    const [{ id }] = await rowsOf(ruleId, deviceId)
    expect(await acknowledge(ruleId, deviceId, id, 1_500)).toEqual({ found: true, resolved: false })
    expect(await acknowledge(ruleId, deviceId, id, 1_600)).toEqual({ found: true, resolved: false })
    expect((await rowsOf(ruleId, deviceId))[0]).toMatchObject({ state: "acknowledged", acknowledged_at: 1_500 })
    expect(await resolve(ruleId, deviceId, id, 2_000)).toEqual({ found: true, resolved: true })
    // Answered once the space counted it.
    expect(await openCount(spaceId)).toBe(0)
    expect(await resolve(ruleId, deviceId, id, 3_000)).toEqual({ found: true, resolved: false })
    expect((await rowsOf(ruleId, deviceId))[0]).toMatchObject({ state: "resolved", resolved_at: 2_000 })
    expect(await resolve(ruleId, deviceId, "alt_unknown", 3_000)).toEqual({ found: false, resolved: false })
    const other = await slot(false)
    await raise(other.ruleId, other.deviceId, "r", 1_000)
    const [{ id: otherId }] = await rowsOf(other.ruleId, other.deviceId)
    expect(await resolve(ruleId, deviceId, otherId, 3_000)).toEqual({ found: false, resolved: false })
    expect((await rowsOf(other.ruleId, other.deviceId))[0].resolved_at).toBeNull()
  })

  it("repeats an open alert it did not know of instead of opening a second", async () => {
    const { deviceId, ruleId } = await slot(false)
    await query(
      `INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, state, first_seen_at, last_seen_at, created_at, updated_at)
       VALUES ('alt_behind_${kind}', $1, $2, $3, 'unresolved', 100, 100, 1, 1)`,
      [organisationId, ruleId, deviceId]
    )
    await raise(ruleId, deviceId, "r", 1_000)
    expect((await rowsOf(ruleId, deviceId)).map((r) => [r.id, r.last_seen_at])).toEqual([[`alt_behind_${kind}`, 1_000]])
  })

  it("opens an alert on a slot it never read only where the slot's rows allow it", async () => {
    // Rows written behind the entity (a step of an earlier owner): a resolved alert seen at 2,000.
    const { spaceId, deviceId, ruleId } = await slot(false)
    await query(
      `INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, state, first_seen_at, last_seen_at, resolved_at, created_at, updated_at)
       VALUES ('alt_resolved_${kind}', $1, $2, $3, 'resolved', 1000, 2000, 2500, 1, 1)`,
      [organisationId, ruleId, deviceId]
    )
    // A raise it applied before (no later than what the slot has seen): nothing opens.
    await raise(ruleId, deviceId, "old", 2_000)
    expect((await rowsOf(ruleId, deviceId)).map((r) => r.id)).toEqual([`alt_resolved_${kind}`])
    // A later occurrence opens a new alert, once, beside the resolved one; the space counts it.
    const other = await slot(false)
    await query(
      `INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, state, first_seen_at, last_seen_at, resolved_at, created_at, updated_at)
       VALUES ('alt_older_${kind}', $1, $2, $3, 'resolved', 1000, 2000, 2500, 1, 1)`,
      [organisationId, other.ruleId, other.deviceId]
    )
    await raise(other.ruleId, other.deviceId, "new", 3_000)
    await raise(other.ruleId, other.deviceId, "new-again", 3_000)
    const rows = await rowsOf(other.ruleId, other.deviceId)
    expect(rows.map((r) => [r.state, r.first_seen_at])).toEqual([["resolved", 1_000], ["unresolved", 3_000]])
    await openCountBecomes(other.spaceId, 1)
    expect(await openCount(spaceId)).toBe(0)
  })

  it("tells the space again when a batch is applied again: a crash between its row and the space's message is repaired", async () => {
    const { spaceId, deviceId, ruleId } = await slot(false)
    // The row an owner wrote before it died, without telling the space.
    await query(
      `INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, state, first_seen_at, last_seen_at, created_at, updated_at)
       VALUES ('alt_crashed_${kind}', $1, $2, $3, 'unresolved', 700, 700, 1, 1)`,
      [organisationId, ruleId, deviceId]
    )
    expect(await openCount(spaceId)).toBe(0)
    // The raise handled again on the new owner: applied already, it changes no row...
    await raise(ruleId, deviceId, "r", 700)
    expect((await rowsOf(ruleId, deviceId)).map((r) => [r.id, r.last_seen_at, r.updated_at])).toEqual([[`alt_crashed_${kind}`, 700, 1]])
    expect(published(deviceId)).toEqual([])
    // ...and the space counts the alert.
    await openCountBecomes(spaceId, 1)
  })

  it("applies a batch of several slots in one message: opened, repeated and cleared in order", async () => {
    const a = await slot(true)
    const b = await slot(true)
    await raise(b.ruleId, b.deviceId, "b", 500)
    const c = { ...b, ruleId: (await t.call("POST", "/alertRules", {
      name: "r2",
      type: "threshold",
      severity: "low",
      autoResolve: true,
      config: { eventName: "never-sent", max: 1 }
    })).body.id as string }
    // One message per device (its bucket): a's slot opens, repeats and clears; b's repeats; c's opens.
    await apply(a.deviceId, [raising(a.ruleId, a.deviceId, 1_000), raising(a.ruleId, a.deviceId, 2_000), clearing(a.ruleId, a.deviceId, 3_000)])
    await apply(b.deviceId, [raising(b.ruleId, b.deviceId, 1_000), raising(c.ruleId, b.deviceId, 1_000), raising(b.ruleId, b.deviceId, 900)])
    expect(await rowsOf(a.ruleId, a.deviceId)).toMatchObject([{ state: "resolved", first_seen_at: 1_000, last_seen_at: 2_000, resolved_at: 3_000 }])
    expect(await rowsOf(b.ruleId, b.deviceId)).toMatchObject([{ state: "unresolved", first_seen_at: 500, last_seen_at: 1_000 }])
    expect(await rowsOf(c.ruleId, b.deviceId)).toMatchObject([{ state: "unresolved", first_seen_at: 1_000 }])
    await openCountBecomes(a.spaceId, 0)
    await openCountBecomes(b.spaceId, 2)
    // Published once per alert written, with its final state.
    expect(published(a.deviceId).map((x) => x.state)).toEqual(["resolved"])
  })

  it("gives one result for resolves racing each other and an auto-resolve, and the space counts it once", async () => {
    const { spaceId, deviceId, ruleId } = await slot(true)
    for (let round = 0; round < 8; round++) {
      const at = 10_000 * (round + 1)
      await raise(ruleId, deviceId, `r${round}`, at)
      const rows = await rowsOf(ruleId, deviceId)
      const { id } = rows[rows.length - 1]
      await openCountBecomes(spaceId, 1)
      const outcomes = await Promise.all([
        t.call("PUT", `/alerts/${id}/resolve`, { resolvedAt: at + 1 }),
        clear(ruleId, deviceId, `c${round}`, at + 2),
        t.call("PUT", `/alerts/${id}/resolve`, { resolvedAt: at + 3 })
      ])
      const answers = [outcomes[0], outcomes[2]].map((r) => r.body as { state: string; resolvedAt: number })
      const [stored] = await query<Row>("SELECT * FROM alerts WHERE id = $1", [id])
      expect([at + 1, at + 2, at + 3]).toContain(stored.resolved_at)
      // Both REST answers are the one resolution stored, whichever came first.
      for (const answer of answers) expect(answer).toMatchObject({ state: "resolved", resolvedAt: stored.resolved_at })
      expect(published(deviceId).filter((a) => a.id === id && a.state === "resolved")).toHaveLength(1)
      expect(await openCount(spaceId)).toBe(0)
    }
    expect((await rowsOf(ruleId, deviceId)).every((r) => r.state === "resolved")).toBe(true)
  })

  it("notifies a newly opened alert off the entity's path: a hanging webhook holds up nothing", async () => {
    const template = (await t.call("POST", "/notificationTemplates", { type: "webhook", webhookUrl: webhook.url, body: "{{alert.id}}" })).body
    const { deviceId, ruleId } = await slot(false, template.id)
    const started = Date.now()
    await raise(ruleId, deviceId, "r1", 1_000)
    const [first] = await rowsOf(ruleId, deviceId)
    expect(await resolve(ruleId, deviceId, first.id, 1_500)).toEqual({ found: true, resolved: true })
    await raise(ruleId, deviceId, "r2", 2_000)
    // The first webhook call hangs (its retries take up to a minute); the entity went on.
    expect(Date.now() - started).toBeLessThan(5_000)
    const second = (await rowsOf(ruleId, deviceId))[1]
    const notified = await eventually(async () => {
      const [row] = await query<Row>("SELECT * FROM alerts WHERE id = $1", [second.id])
      return row.notifications.length > 0 ? row.notifications : undefined
    }, 5_000, "the second alert's webhook")
    expect(notified.value).toMatchObject([{ channel: "webhook", status: "delivered" }])
    expect(webhook.received.map((r) => r.body)).toEqual([first.id, second.id])
  })
})
