import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as store from "../../src/store/mqttSessions.ts"
import type { SqlClient } from "../../src/store/Sql.ts"
import { openTestStore, STORE_KINDS, type TestStore } from "../support/databases.ts"

describe.each(STORE_KINDS)("stored MQTT sessions on %s", (kind) => {
  let testStore: TestStore
  let sql: SqlClient
  const run = <A>(effect: Effect.Effect<A, unknown>) => Effect.runPromise(effect)
  const delivery = (topic: string, payload = `{"n":"${topic}"}`) => ({ deviceId: topic.split("/")[1], topic, payload, key: `k:${topic}:${payload}` })
  const session = async (clientId: string, topics: ReadonlyArray<string>, principal = "app/org/a") => {
    await run(store.claimSession(sql, clientId, principal))
    await run(store.saveSubscriptions(sql, clientId, principal, topics.map((topic) => ({ topic, deviceId: topic.split("/")[1], qos: 1 }))))
  }
  const queued = async (clientId: string) => (await run(store.queuedFor(sql, clientId))).map((d) => d.topic)

  beforeAll(async () => {
    testStore = await openTestStore(kind)
    sql = testStore.sql
  })
  afterAll(() => testStore.close())

  it("queues a delivery once per client id however many processes queue it, and not again once acknowledged", async () => {
    await session("once", ["devices/dev_a/events/+"])
    const d = delivery("devices/dev_a/events/t")
    // Two processes received it from the bus.
    expect(await run(store.enqueueDelivery(sql, d, 10))).toEqual([])
    expect(await run(store.enqueueDelivery(sql, d, 10))).toEqual([])
    expect(await queued("once")).toEqual(["devices/dev_a/events/t"])
    await run(store.markSent(sql, "once", d.key, 7))
    expect(await run(store.acknowledge(sql, "once", 7))).toMatchObject({ topic: d.topic, payload: d.payload, messageId: 7 })
    expect(await run(store.acknowledge(sql, "once", 7))).toBeUndefined()
    // A third process, late: the acknowledgement is remembered.
    await run(store.enqueueDelivery(sql, d, 10))
    expect(await queued("once")).toEqual([])
    // Until it is swept, long after.
    await run(store.sweepAcknowledged(sql))
    await run(sql.query("UPDATE mqtt_outgoing SET acked_at = acked_at - $1::bigint WHERE client_id = 'once'", [store.ACKNOWLEDGED_KEPT_MS + 1]))
    await run(store.sweepAcknowledged(sql))
    expect(await run(sql.query("SELECT 1 FROM mqtt_outgoing WHERE client_id = 'once'"))).toEqual([])
  })

  it("matches a delivery against each filter's levels, LIKE's own wildcards taken literally", async () => {
    await session("filters", ["devices/dev_b/events/a_c", "devices/dev_b/commands/+/run", "devices/dev_b/locations"])
    for (const topic of ["devices/dev_b/events/abc", "devices/dev_b/events/a_c", "devices/dev_b/commands/reboot/run", "devices/dev_b/alerts", "devices/dev_b/locations", "devices/dev_c/locations"]) {
      await run(store.enqueueDelivery(sql, delivery(topic), 10))
    }
    expect(await queued("filters")).toEqual(["devices/dev_b/events/a_c", "devices/dev_b/commands/reboot/run", "devices/dev_b/locations"])
    expect(store.likePattern("devices/dev_b/events/50%_+")).toBe("devices/dev\\_b/events/50\\%\\_+")
    expect(store.likePattern("devices/d/events/#")).toBe("devices/d/events/%")
  })

  it("keeps at most the bound per client id unacknowledged and names the full ones", async () => {
    await session("bounded", ["devices/dev_d/events/+"])
    await session("roomy", ["devices/dev_d/events/+"])
    await run(store.enqueueDelivery(sql, delivery("devices/dev_d/events/0"), 5))
    const full = []
    for (let i = 1; i < 4; i++) full.push(await run(store.enqueueDelivery(sql, delivery(`devices/dev_d/events/${i}`), 2)))
    expect(full).toEqual([[], ["bounded", "roomy"], ["bounded", "roomy"]])
    expect(await queued("bounded")).toEqual(["devices/dev_d/events/0", "devices/dev_d/events/1"])
  })

  it("keeps a session its principal's, and a clean CONNECT's forgetting takes its queue along", async () => {
    await session("owned", ["devices/dev_e/events/+"], "app/org/owner")
    expect(await run(store.claimSession(sql, "owned", "app/org/other"))).toBe("app/org/owner")
    await run(store.saveSubscriptions(sql, "owned", "app/org/other", [{ topic: "devices/dev_f/events/+", deviceId: "dev_f", qos: 1 }]))
    expect(await run(store.subscriptionsOf(sql, "owned"))).toEqual([{ topic: "devices/dev_e/events/+", qos: 1 }])
    expect(await run(store.watchedDevices(sql))).toContain("dev_e")
    await run(store.enqueueDelivery(sql, delivery("devices/dev_e/events/x"), 10))
    await run(store.forgetSession(sql, "owned"))
    expect(await run(store.sessionHolder(sql, "owned"))).toBeUndefined()
    expect(await queued("owned")).toEqual([])
    expect(await run(store.watchedDevices(sql))).not.toContain("dev_e")
  })
})
