import { Deferred, Effect, Exit, Scope } from "effect"
import type { MqttClient } from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Bus } from "../../src/bus/Bus.ts"
import { BOOTSTRAP_KEY, type TestResponse } from "../support/app.ts"
import { createPostgresDatabase, STORE_KINDS, type TestDatabase } from "../support/databases.ts"
import { closedBy, connectUrl, type MqttTestApp, startMqttApp, within } from "../support/mqtt.ts"

type Caller = Pick<MqttTestApp, "call">

interface Revocable {
  /** The MQTT username. */
  readonly credential: string
  /** A device whose events the credential may publish. */
  readonly deviceId: string
  revoke(): Promise<void>
}

const ok = (res: TestResponse, what: string) => {
  if (res.status !== 200) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body
}

let made = 0
const newDevice = async (t: Caller, spaceId: string) =>
  ok(await t.call("POST", "/devices", { body: { name: `Revoked ${++made}`, space: { id: spaceId } } }), "device")

const newUserToken = async (t: Caller) => {
  const emailAddress = `leaver${++made}-${Date.now()}@example.com`
  const user = ok(await t.call("POST", "/organisations/users/", { body: { emailAddress, fullName: "Leaver", password: "leaving password" } }), "user")
  const token = ok(
    await t.call("POST", "/auth/token", { headers: { "x-app-key": BOOTSTRAP_KEY }, body: { username: emailAddress, password: "leaving password" } }),
    "token"
  )
  return { organisationUserId: String(user.id), accessToken: String(token.accessToken) }
}

/** Each way a credential ends, made through `t` (the process that changes the store). */
const cases: ReadonlyArray<readonly [string, (t: Caller, spaceId: string, deviceId: string) => Promise<Revocable>]> = [
  ["an application key deleted", async (t, _, deviceId) => {
    const key = ok(await t.call("POST", "/apiKeys", { body: { name: "short-lived" } }), "api key")
    return { credential: key.secretKey, deviceId, revoke: async () => void ok(await t.call("DELETE", `/apiKeys/${key.id}`), "delete") }
  }],
  ["a device key rotated", async (t, spaceId) => {
    const device = await newDevice(t, spaceId)
    return {
      credential: device.secretKey,
      deviceId: device.id,
      revoke: async () => void ok(await t.call("POST", `/devices/${device.id}/secretKey`), "rotate")
    }
  }],
  ["a device deleted", async (t, spaceId) => {
    const device = await newDevice(t, spaceId)
    return { credential: device.secretKey, deviceId: device.id, revoke: async () => void ok(await t.call("DELETE", `/devices/${device.id}`), "delete") }
  }],
  ["a user token revoked", async (t, _, deviceId) => {
    const { accessToken } = await newUserToken(t)
    return {
      credential: accessToken,
      deviceId,
      revoke: async () => expect(ok(await t.call("POST", "/auth/token/revoke", { body: { token: accessToken } }), "revoke")).toEqual({ revoked: true })
    }
  }],
  ["an organisation user removed", async (t, _, deviceId) => {
    const { accessToken, organisationUserId } = await newUserToken(t)
    return {
      credential: accessToken,
      deviceId,
      revoke: async () => void ok(await t.call("DELETE", `/organisations/users/${organisationUserId}`), "remove")
    }
  }]
]

/** The first refusal of a reconnecting client's CONNECT. */
const refusedOnReconnect = (client: MqttClient) =>
  within(
    new Promise<string>((resolve) => {
      client.on("error", (error) => {
        if (/Bad username or password/.test(error.message)) resolve(error.message)
      })
    }),
    "the reconnect to be refused"
  )

/** Events of that name stored for the device (none once the device is deleted: they go with it). */
const storedEvents = async (t: Caller, deviceId: string, name: string): Promise<number> => {
  const res = await t.call("GET", `/events?device.id=${deviceId}&name=${name}`)
  if (res.status === 404) return 0
  return ok(res, "events").count
}

/**
 * Opens a TCP and a WebSocket connection on `on` with the credential, revokes it through
 * `through`, and checks both connections close, their reconnects are refused, a publish queued
 * meanwhile is not stored, and `on`'s REST refuses the credential too.
 */
const expectCutOff = async (through: Caller, on: MqttTestApp, made: Revocable, label: string) => {
  const urls = [`mqtt://127.0.0.1:${on.server?.port}`, `ws://127.0.0.1:${on.server?.wsPort}/mqtt`]
  // Like a stock client: it reconnects on its own, and re-sends what it published meanwhile.
  const clients = await Promise.all(urls.map((url) => connectUrl(url, { username: made.credential, password: " ", reconnectPeriod: 100 })))
  try {
    expect(clients.every((client) => client.connected)).toBe(true)
    const closed = Promise.all(clients.map((client) => closedBy(client)))
    await made.revoke()
    await closed
    const refused = clients.map(refusedOnReconnect)
    const name = `after-${label.replaceAll(" ", "-")}`
    for (const client of clients) client.publish(`devices/${made.deviceId}/events/${name}`, JSON.stringify({ data: 1 }), { qos: 1 })
    expect(await Promise.all(refused)).toHaveLength(2)
    expect(await storedEvents(through, made.deviceId, name)).toBe(0)
    expect((await on.call("GET", "/whoami", { key: made.credential })).status).toBe(401)
  } finally {
    await Promise.all(clients.map((client) => client.endAsync(true)))
  }
}

describe("revocation on one process cuts off another's sessions with every bus message lost", () => {
  let db: TestDatabase
  let a: MqttTestApp
  let b: MqttTestApp
  let spaceId: string
  let deviceId: string
  beforeAll(async () => {
    db = await createPostgresDatabase()
    // Each app has its own in-memory bus: nothing one sends reaches the other.
    a = await startMqttApp({ database: db.url })
    b = await startMqttApp({ database: db.url }, { listen: true, env: { CREDENTIAL_CHECK_INTERVAL: "200 millis" } })
    spaceId = ok(await a.call("POST", "/spaces", { body: { name: "Two processes" } }), "space").id
    deviceId = (await newDevice(a, spaceId)).id
  })
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await db?.drop()
  })

  for (const [label, make] of cases) {
    it(`closes the TCP and WebSocket sessions of ${label}`, async () => {
      await expectCutOff(a, b, await make(a, spaceId, deviceId), label)
    })
  }
})

for (const kind of STORE_KINDS) {
  describe(`revocation on the process holding the session, its bus notice lost (${kind})`, () => {
    let t: MqttTestApp
    let spaceId: string
    let deviceId: string
    beforeAll(async () => {
      // The counter is read once at start and then not for an hour: only the change applied
      // by the process that made it can close the sessions within the test.
      t = await startMqttApp(kind, { listen: true, bus: Bus.losingControl, env: { CREDENTIAL_CHECK_INTERVAL: "1 hour" } })
      spaceId = ok(await t.call("POST", "/spaces", { body: { name: "One process" } }), "space").id
      deviceId = (await newDevice(t, spaceId)).id
    })
    afterAll(() => t?.close())

    for (const [label, make] of cases) {
      it(`closes the sessions of ${label} at once`, async () => {
        await expectCutOff(t, t, await make(t, spaceId, deviceId), label)
      })
    }
  })
}

describe("a device CONNECT held back while its key is rotated", () => {
  let t: MqttTestApp
  beforeAll(async () => {
    t = await startMqttApp("pglite")
  })
  afterAll(() => t?.close())

  it("is refused when the change was applied during the wait: its credential is asked for again before the session is registered", async () => {
    const space = await t.call("POST", "/spaces", { body: { name: "Held" } })
    const device = (await t.call("POST", "/devices", { body: { name: "Held", space: { id: space.body.id } } })).body
    // The device's actor mailbox is full for its first CONNECT (as `Activity.offer` waits) until released.
    const gate = Effect.runSync(Deferred.make<void>())
    const reached = Effect.runSync(Deferred.make<void>())
    let held = false
    const scope = Effect.runSync(Scope.make())
    const offer = () => {
      if (held) return Effect.void
      held = true
      return Effect.andThen(Deferred.succeed(reached, undefined), Deferred.await(gate))
    }
    await Effect.runPromise(Effect.provideService(t.activity.subscribe({ publish: () => {}, offer }), Scope.Scope, scope))
    const connecting = t.connectInMemory({ username: device.secretKey, password: " " }).then(
      (client) => client,
      (e: Error) => e
    )
    await Effect.runPromise(Deferred.await(reached))
    // A witness session on the same key: once it is closed, the change was applied in this process.
    const witness = await t.connectInMemory({ username: device.secretKey, password: " " })
    const witnessClosed = closedBy(witness)
    expect((await t.call("POST", `/devices/${device.id}/secretKey`)).status).toBe(200)
    await witnessClosed
    await Effect.runPromise(Deferred.succeed(gate, undefined))
    const outcome = await connecting
    expect(outcome).toBeInstanceOf(Error)
    expect(String(outcome)).toMatch(/Bad username or password/)
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })
})
