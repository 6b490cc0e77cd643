import { Effect, Exit, Scope } from "effect"
import { EntityId, Sharding } from "effect/cluster"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Bus, type Delivery } from "../../src/bus/Bus.ts"
import { AlertBucket, alertBucketOf, type AlertIntent, Space } from "../../src/entities/protocol.ts"
import { Sql } from "../../src/store/Sql.ts"
import { startCore, type TestCore } from "../support/core.ts"
import { createPostgresDatabase, type TestDatabase } from "../support/databases.ts"
import { eventually } from "../support/eventually.ts"

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222"

/** Whether this process's runner owns the shard of the alert bucket entity now. */
const owns = (t: TestCore, entityId: string) =>
  t.run(Effect.gen(function*() {
    const sharding = yield* Sharding.Sharding
    return sharding.hasShardId(yield* AlertBucket.getShardId(EntityId.make(entityId)))
  }))

/**
 * Two processes on one Postgres database and one NATS, each a runner with its REST port (the
 * cluster's runner endpoint) on a real socket: every alert entity has one owner, in either.
 */
describe("alert entities across two runners on Postgres", () => {
  let db: TestDatabase
  let a: TestCore
  let b: TestCore
  const scope = Effect.runSync(Scope.make())
  const deliveries: Array<Delivery> = []
  beforeAll(async () => {
    db = await createPostgresDatabase()
    a = await startCore({ database: db.url }, { listen: true, env: { NATS_URL } })
    b = await startCore({ database: db.url }, { listen: true, env: { NATS_URL } })
    // With NATS, every process receives every delivery: one listener sees them all.
    await a.run(Bus.use((bus) => bus.onDelivery((d) => deliveries.push(d))).pipe(Scope.provide(scope)))
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await b?.close()
    await a?.close()
    await db?.drop()
  })

  it("give one result for a resolve on one process racing an auto-resolve on the other, whichever owns the alert", async () => {
    const space = (await a.call("POST", "/spaces", { name: "Shared" })).body as { id: string }
    const rule = (await a.call("POST", "/alertRules", {
      name: "Shared hot",
      type: "threshold",
      severity: "low",
      autoResolve: true,
      space: { id: space.id },
      config: { eventName: "never-sent", max: 1 }
    })).body as { id: string; organisation: { id: string } }
    const devices: Array<string> = []
    // Enough devices that both runners own some of their slots whatever the shards' split: with 8,
    // all of them fell on one runner's shards about once in 128 runs, and the wait below never ended.
    for (let i = 0; i < 24; i++) devices.push(((await a.call("POST", "/devices", { name: `d${i}`, space: { id: space.id } })).body as { id: string }).id)
    const slots = devices.map((deviceId) => ({ deviceId, entityId: alertBucketOf(deviceId) }))
    const intent = (kind: "raise" | "clear", deviceId: string, at: number): AlertIntent => ({
      kind,
      ruleId: rule.id,
      deviceId,
      organisationId: rule.organisation.id,
      at,
      note: "hot",
      event: null,
      autoResolve: true
    })

    // Both runners hold shards, and each slot has exactly one owner (b's arrival moves shards to it).
    const owners = await eventually(async () => {
      const found = await Promise.all(slots.map(async (s) => ({ ...s, inA: await owns(a, s.entityId), inB: await owns(b, s.entityId) })))
      const settled = found.every((s) => s.inA !== s.inB)
      return settled && found.some((s) => s.inA) && found.some((s) => s.inB) ? found : undefined
    }, 30_000, "shards owned by both runners")

    const query = <T>(text: string, params: ReadonlyArray<unknown>) => a.run(Sql.use((sql) => sql.query<T>(text, params)))
    const openIn = (t: TestCore) => t.run(Effect.flatMap(Space.client, (client) => client(space.id).GetSpace())).then((s) => s.openAlerts)

    for (let round = 0; round < 2; round++) {
      const at = 100_000 * (round + 1)
      // Raised from the process that does not own the slot: the message crosses.
      await Promise.all(owners.value.map((s) =>
        (s.inA ? b : a).run(Effect.flatMap(AlertBucket.client, (client) => client(s.entityId).Apply({ intents: [intent("raise", s.deviceId, at)] })))
      ))
      const open = await query<{ id: string; device_id: string }>(
        "SELECT id, device_id FROM alerts WHERE alert_rule_id = $1 AND resolved_at IS NULL",
        [rule.id]
      )
      expect(open).toHaveLength(devices.length)
      await eventually(async () => ((await openIn(b)) === devices.length ? true : undefined), 5_000, "every alert counted")

      // For each alert at once: a resolve over REST on A, an auto-resolve sent from B, a second resolve on B.
      const outcomes = await Promise.all(open.map(async ({ id, device_id }) => {
        const [first, , second] = await Promise.all([
          a.call("PUT", `/alerts/${id}/resolve`, { resolvedAt: at + 1 }),
          b.run(Effect.flatMap(AlertBucket.client, (client) => client(alertBucketOf(device_id)).Apply({ intents: [intent("clear", device_id, at + 2)] }))),
          b.call("PUT", `/alerts/${id}/resolve`, { resolvedAt: at + 3 })
        ])
        return { id, answers: [first.body, second.body] as Array<{ state: string; resolvedAt: number }> }
      }))
      const stored = await query<{ id: string; resolved_at: number; state: string }>(
        "SELECT id, resolved_at, state FROM alerts WHERE id = ANY($1::text[])",
        [open.map((o) => o.id)]
      )
      const resolvedAt = new Map(stored.map((r) => [r.id, r.resolved_at]))
      for (const { id, answers } of outcomes) {
        expect([at + 1, at + 2, at + 3]).toContain(resolvedAt.get(id))
        for (const answer of answers) expect(answer).toMatchObject({ state: "resolved", resolvedAt: resolvedAt.get(id) })
      }
      // Resolved once: one resolution published per alert, and the space counted each close once.
      await eventually(async () => {
        const resolutions = open.map(({ id }) =>
          deliveries.filter((d) => (JSON.parse(d.payload) as { id: string; state: string }).id === id)
            .filter((d) => (JSON.parse(d.payload) as { state: string }).state === "resolved").length
        )
        return resolutions.every((n) => n === 1) ? true : undefined
      }, 5_000, "one resolution published per alert")
      expect(await openIn(a)).toBe(0)
      expect(await openIn(b)).toBe(0)
    }
    const [{ n }] = await query<{ n: number }>("SELECT count(*)::int AS n FROM alerts WHERE alert_rule_id = $1", [rule.id])
    expect(n).toBe(devices.length * 2)
  }, 90_000)
})
