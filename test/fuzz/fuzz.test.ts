import { ConfigProvider, Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type EngineOptions, runInputs } from "../../fuzz/engine.ts"
import type { Targets } from "../../fuzz/generators/index.ts"
import { judge } from "../../fuzz/oracle.ts"
import { CoapSender } from "../../fuzz/senders/coap.ts"
import type { HttpTransport } from "../../fuzz/senders/rest.ts"
import { restCaller, seed } from "../../fuzz/seed.ts"
import { Tally } from "../../fuzz/tally.ts"
import { CoapListener } from "../../src/adapters/coap/CoapListener.ts"
import { CoapLive, CoapServer } from "../../src/adapters/coap/CoapServer.ts"
import { makeHttpApp } from "../../src/adapters/http/HttpApp.ts"
import { MqttBroker } from "../../src/adapters/mqtt/MqttBroker.ts"
import { CoreLive } from "../../src/app.ts"
import { Sql } from "../../src/store/Sql.ts"
import { ADMIN_EMAIL, ADMIN_PASSWORD, BOOTSTRAP_KEY } from "../support/app.ts"
import { duplexPair } from "../support/mqtt.ts"

/**
 * The sample of `npm run fuzz` in `npm test`: the same generators (fuzz/generators/), sent in
 * process — REST through `app.request`, MQTT through aedes `handle()` over in-memory duplex
 * pairs, CoAP to the CoAP layer on a UDP port 0 — on an in-memory PGlite.
 */
const INPUTS = 2_500

const options: EngineOptions = {
  count: INPUTS,
  seed: 15,
  payload: { exclude: new Set(), maxDepth: 6_000 },
  mix: { mqtt: 5, coap: 3, rest: 2 },
  width: { mqtt: 8, odd: 16, raw: 16, coap: 32, coapOdd: 128, rest: 16 },
  timeoutMs: 10_000,
  shortTimeoutMs: 300
}

interface Running {
  readonly context: Context.Context<Sql | MqttBroker | CoapServer>
  readonly http: HttpTransport
  readonly fetch: (path: string, init: RequestInit) => Response | Promise<Response>
  readonly errors: Array<string>
  close(): Promise<void>
}

/** Core, REST, the MQTT broker (no listener) and CoAP on port 0, with error logs captured. */
const start = async (): Promise<Running> => {
  const scope = await Effect.runPromise(Scope.make())
  const errors: Array<string> = []
  const capture = Logger.make<unknown, void>(({ logLevel, message }) => {
    if (logLevel === "Error" || logLevel === "Fatal") errors.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
  })
  const provider = ConfigProvider.fromEnvRecord({
    DATABASE_URL: "memory://",
    BOOTSTRAP_APP_KEY: BOOTSTRAP_KEY,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    // Refusals are logged (at info), and the fuzzer makes thousands on purpose.
    LOG_LEVEL: "error",
    HOST: "127.0.0.1",
    COAP_PORT: "0"
  })
  const layer = Layer.mergeAll(MqttBroker.layer, CoapLive.pipe(Layer.provide(CoapListener.layer))).pipe(
    Layer.provideMerge(CoreLive),
    Layer.provide(Logger.layer([capture])),
    Layer.provide(ConfigProvider.layer(provider))
  )
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  const app = await Effect.runPromise(Effect.provideContext(makeHttpApp, context))
  const http: HttpTransport = async (input) => {
    const body = input.body === undefined || typeof input.body === "string" ? input.body : new Uint8Array(input.body)
    const res = await app.request(input.path, { method: input.method, headers: input.headers, body })
    return { status: res.status, body: await res.text() }
  }
  return { context, http, fetch: (path, init) => app.request(path, init), errors, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

describe("fuzzing in process (a sample of npm run fuzz)", () => {
  let running: Running

  beforeAll(async () => {
    running = await start()
  })
  afterAll(async () => {
    await running?.close()
  })

  it("answers every generated input without a server error, and stores nothing of a refused one", async () => {
    const call = restCaller(running.fetch, BOOTSTRAP_KEY)
    const seeded = await seed(call)
    const targets: Targets = { appKey: BOOTSTRAP_KEY, ...seeded.devices, frozen: seeded.devices.frozen.id }
    const broker = Context.get(running.context, MqttBroker)
    const coap = new CoapSender("127.0.0.1", () => Context.get(running.context, CoapServer).port)
    const openMqtt = () => {
      const [near, far] = duplexPair()
      broker.handle(far)
      return near
    }
    const tally = new Tally(INPUTS)
    const run = runInputs({ openMqtt, coap, http: running.http }, targets, options, tally)
    await run.done
    await Promise.all([...run.sessions.values()].map((session) => session.close()))
    coap.close()

    const sql = Context.get(running.context, Sql)
    const findings = await judge((statement, params) => Effect.runPromise(sql.query(statement, params)), targets, tally, INPUTS)
    const frozen = await call("GET", `/devices/${targets.frozen}`)
    const failures = tally.samples.map((s) => `${s.protocol} ${s.outcome}: ${s.input}`)

    expect(tally.inputs).toBe(INPUTS)
    expect(Math.min(tally.sent.mqtt, tally.sent.coap, tally.sent.rest)).toBeGreaterThan(INPUTS / 10)
    // The valid inputs reached the store through every protocol.
    expect(Math.min(findings.validStored.mqtt, findings.validStored.coap, findings.validStored.rest)).toBeGreaterThan(50)
    expect({ serverErrors: tally.total("failed"), failures }).toEqual({ serverErrors: 0, failures: [] })
    expect(running.errors).toEqual([])
    expect({ ...findings.storedFromInvalid, rows: findings.invalidRows }).toEqual({ events: 0, locations: 0, "command runs": 0, commands: 0, devices: 0, spaces: 0, rows: [] })
    expect(frozen.updatedAt).toBe(seeded.frozenUpdatedAt)
    expect({ refused: findings.storedFromRefused, twice: findings.storedTwice, ackedNotStored: findings.ackedNotStored })
      .toEqual({ refused: 0, twice: 0, ackedNotStored: { mqtt: 0, coap: 0, rest: 0 } })
  }, 60_000)
})
