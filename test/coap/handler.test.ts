import { Effect, Layer, Logger } from "effect"
import { describe, expect, it } from "vitest"
import { type CoapReply, coapError } from "../../src/adapters/coap/errors.ts"
import { type CoapRequest, handleCoap, MAX_COAP_PAYLOAD_BYTES, MAX_REPLY_BYTES } from "../../src/adapters/coap/handler.ts"
import { Auth } from "../../src/auth/Auth.ts"
import type { Principal } from "../../src/auth/Principal.ts"
import {
  Conflict,
  type DomainError,
  Forbidden,
  InvalidInput,
  NotFound,
  PayloadTooLarge,
  RateLimited,
  Unauthorized,
  Unavailable,
  UnsupportedMediaType
} from "../../src/domain/errors.ts"
import { type Envelope, Ingest, type IngestError, type IngestService } from "../../src/ingest/Ingest.ts"
import { SqlError } from "../../src/store/Sql.ts"

const device: Principal = { kind: "device", id: "dev_1", organisationId: "org_1" }
const application: Principal = { kind: "app", id: "key_1", organisationId: "org_1", readOnly: false, platform: false }

const auth = Layer.succeed(
  Auth,
  Auth.of({
    authenticate: (secret) =>
      secret === "d_sk_device"
        ? Effect.succeed(device)
        : secret === "a_sk_app"
        ? Effect.succeed(application)
        : Effect.fail(new Unauthorized({ message: "not authenticated: the credential is unknown, expired or revoked" })),
    forget: () => Effect.void,
    onCredentialsChanged: () => Effect.void
  })
)

/** An Ingest that records every envelope and answers as told (by default: stored). */
const recording = (outcome: (envelope: Envelope<unknown>) => Effect.Effect<never, IngestError> | "stored" = () => "stored") => {
  const envelopes: Array<Envelope<unknown>> = []
  const answer = <A>(envelope: Envelope<unknown>, stored: A): Effect.Effect<A, IngestError> => {
    envelopes.push(envelope)
    const o = outcome(envelope)
    return o === "stored" ? Effect.succeed(stored) : o
  }
  const service: IngestService = {
    event: (e) => answer(e, { id: "evt_1", name: e.payload.name, data: e.payload.data ?? null, timestamp: e.payload.timestamp ?? 1, device: { id: "dev_1" } }),
    location: (e) =>
      answer(e, {
        id: "loc_1",
        latitude: String(e.payload.latitude),
        longitude: String(e.payload.longitude),
        altitude: e.payload.altitude === undefined ? null : String(e.payload.altitude),
        timestamp: e.payload.timestamp ?? 1,
        device: { id: "dev_1" }
      }),
    runCommand: () => Effect.die("not used over CoAP"),
    submitEvent: () => false,
    commandsChanged: () => Effect.void,
    forgetDevices: () => undefined
  }
  return { envelopes, layer: Layer.succeed(Ingest, Ingest.of(service)) }
}

const logged: Array<string> = []
const captureLogs = Logger.layer([Logger.make(({ message }) => logged.push(String(message)))])

const run = (request: Partial<CoapRequest> & { body?: unknown }, ingest = recording()): Promise<CoapReply & { json: any }> => {
  const payload = request.payload ?? new TextEncoder().encode(typeof request.body === "string" ? request.body : JSON.stringify(request.body ?? {}))
  const full: CoapRequest = { method: "POST", path: "/events", contentFormat: undefined, ...request, payload }
  return Effect.runPromise(handleCoap(full).pipe(Effect.provide(Layer.mergeAll(auth, ingest.layer, captureLogs)))).then((reply) => ({
    ...reply,
    json: JSON.parse(reply.payload)
  }))
}

describe("CoAP request → Envelope → reply, without sockets", () => {
  it("turns POST /events into an event envelope for the key's device, without the key", async () => {
    const ingest = recording()
    const reply = await run({ body: { accessToken: "d_sk_device", name: "temperature", data: { c: 21 }, timestamp: "2024-01-02T03:04:05Z" } }, ingest)
    expect(reply.code).toBe("2.01")
    expect(reply.json).toMatchObject({ id: "evt_1", name: "temperature" })
    expect(ingest.envelopes).toEqual([{
      principal: device,
      protocol: "coap",
      device: undefined,
      payload: { name: "temperature", data: { c: 21 }, timestamp: Date.parse("2024-01-02T03:04:05Z") }
    }])
  })

  it("turns POST /locations into a location envelope with numeric coordinates", async () => {
    const ingest = recording()
    const reply = await run({ path: "/locations", body: { accessToken: "d_sk_device", latitude: "53.5", longitude: -6, altitude: 12 } }, ingest)
    expect(reply.code).toBe("2.01")
    expect(reply.json).toMatchObject({ id: "loc_1", latitude: "53.5", longitude: "-6", altitude: "12" })
    expect(ingest.envelopes[0]).toMatchObject({ protocol: "coap", payload: { latitude: 53.5, longitude: -6, altitude: 12 } })
  })

  it("takes the device an application key names, dotted keys included", async () => {
    const ingest = recording()
    await run({ body: { accessToken: "a_sk_app", name: "door", "device.customId": "gate-1" } }, ingest)
    await run({ body: { accessToken: "a_sk_app", name: "door", device: { id: "dev_9" } } }, ingest)
    expect(ingest.envelopes.map((e) => [e.principal, e.device])).toEqual([[application, { customId: "gate-1" }], [application, { id: "dev_9" }]])
  })

  it("keeps dotted keys inside the event's data as the device sent them, as MQTT does", async () => {
    const ingest = recording()
    const data = { "temp.c": 21.5, probe: { "a.b": [1, { "c.d": true }] } }
    await run({ body: { accessToken: "d_sk_device", name: "climate", data, "data2.x": 1 } }, ingest)
    expect(ingest.envelopes[0].payload).toMatchObject({ name: "climate", data })
  })

  it("accepts no Content-Format, application/json and text/plain; refuses others with 4.15", async () => {
    for (const contentFormat of [undefined, "application/json", "text/plain"]) {
      expect((await run({ contentFormat, body: { accessToken: "d_sk_device", name: "x" } })).code).toBe("2.01")
    }
    for (const contentFormat of ["application/cbor", 11050]) {
      expect((await run({ contentFormat, body: { accessToken: "d_sk_device", name: "x" } })).code).toBe("4.15")
    }
  })

  it("checks path, then method, then the payload, then the key, then the fields", async () => {
    const ingest = recording()
    const cases: Array<[Partial<CoapRequest> & { body?: unknown }, string, string | undefined]> = [
      [{ path: "/event", method: "GET" }, "4.04", undefined],
      [{ path: "/", body: {} }, "4.04", undefined],
      [{ path: "/toString", body: {} }, "4.04", undefined],
      [{ method: "GET" }, "4.05", undefined],
      [{ method: "0.08" }, "4.05", undefined],
      [{ body: "not json" }, "4.00", "body"],
      [{ payload: new Uint8Array([0x7b, 0xff, 0x7d]) }, "4.00", "body"],
      [{ body: "null" }, "4.00", "body"],
      [{ body: { name: "missing key", data: 1 } }, "4.01", undefined],
      [{ body: { accessToken: "", name: "x" } }, "4.01", undefined],
      [{ body: { accessToken: "d_sk_unknown" } }, "4.01", undefined],
      [{ body: { accessToken: ["d_sk_device"], name: "x" } }, "4.00", "accessToken"],
      [{ body: { accessToken: "d_sk_device" } }, "4.00", "name"],
      [{ body: { accessToken: "d_sk_device", name: "" } }, "4.00", "name"],
      [{ path: "/locations", body: { accessToken: "d_sk_device", latitude: 1 } }, "4.00", "longitude"]
    ]
    for (const [request, code, field] of cases) {
      const reply = await run(request, ingest)
      expect(reply.code, JSON.stringify(request)).toBe(code)
      expect(reply.json.error).toMatchObject({ status: code })
      if (field !== undefined) expect(reply.json.error.field).toBe(field)
    }
    expect(ingest.envelopes).toEqual([])
    expect((await run({ body: { accessToken: "d_sk_device" } })).json.error.message).toBe("name: is required")
  })

  it("refuses a payload beyond the CoAP limit with 4.13 and Size1 before reading it", async () => {
    const reply = await run({ payload: new Uint8Array(MAX_COAP_PAYLOAD_BYTES + 1) })
    expect(reply).toMatchObject({ code: "4.13", size1: MAX_COAP_PAYLOAD_BYTES })
  })

  it("answers 2.01 within one block, leaving out data that does not fit", async () => {
    const small = await run({ body: { accessToken: "d_sk_device", name: "x", data: "y".repeat(100) } })
    expect(small.json.data).toBe("y".repeat(100))
    const big = await run({ body: { accessToken: "d_sk_device", name: "x", data: "y".repeat(2000) } })
    expect(big.code).toBe("2.01")
    expect(big.json).toEqual({ id: "evt_1", name: "x", timestamp: 1, device: { id: "dev_1" } })
    expect(Buffer.byteLength(big.payload)).toBeLessThanOrEqual(MAX_REPLY_BYTES)
  })

  it("maps Ingest's refusals through the error table: 4.03, 4.04, 4.13, 5.03 with Max-Age", async () => {
    const cases: Array<[Effect.Effect<never, IngestError>, Partial<CoapReply>]> = [
      [Effect.fail(new Forbidden({ message: "a device key may only act as its own device" })), { code: "4.03" }],
      [Effect.fail(new NotFound({ resource: "device", id: "dev_x" })), { code: "4.04" }],
      [Effect.fail(new PayloadTooLarge({ limit: 262_144 })), { code: "4.13", size1: 262_144 }],
      [Effect.fail(new Unavailable({ retryAfterSeconds: 3, message: "the store is behind; retry shortly" })), { code: "5.03", maxAge: 3 }]
    ]
    for (const [failure, expected] of cases) {
      const reply = await run({ body: { accessToken: "d_sk_device", name: "x" } }, recording(() => failure))
      expect(reply).toMatchObject(expected)
    }
  })

  it("answers 5.00 to a store failure or a defect and logs it once", async () => {
    logged.length = 0
    const sqlError = await run(
      { body: { accessToken: "d_sk_device", name: "x" } },
      recording(() => Effect.fail(new SqlError({ message: "connection lost", cause: new Error("reset") })))
    )
    expect(sqlError.code).toBe("5.00")
    const defect = await run({ body: { accessToken: "d_sk_device", name: "x" } }, recording(() => Effect.die(new Error("boom"))))
    expect(defect.code).toBe("5.00")
    expect(defect.json.error.message).not.toContain("boom")
    expect(logged).toHaveLength(2)
    expect(logged[1]).toContain("boom")
  })

  it("has a CoAP code for every domain error", () => {
    const errors: Array<[DomainError, string]> = [
      [new InvalidInput({ field: "name", message: "name: is required" }), "4.00"],
      [new Unauthorized({ message: "no" }), "4.01"],
      [new Forbidden({ message: "no" }), "4.03"],
      [new NotFound({ resource: "device", id: "x" }), "4.04"],
      [new Conflict({ message: "taken" }), "4.09"],
      [new PayloadTooLarge({ limit: 1 }), "4.13"],
      [new UnsupportedMediaType({ contentType: "application/cbor" }), "4.15"],
      [new RateLimited({ retryAfterSeconds: 2, message: "slow down" }), "4.29"],
      [new Unavailable({ retryAfterSeconds: 1, message: "behind" }), "5.03"]
    ]
    for (const [error, code] of errors) {
      const reply = coapError(error)
      expect(reply.code).toBe(code)
      expect(JSON.parse(reply.payload).error).toMatchObject({ status: code, message: expect.any(String) })
    }
    expect(coapError(new RateLimited({ retryAfterSeconds: 2, message: "slow down" })).maxAge).toBe(2)
  })
})
