import type { Agent } from "coap"
import { generate, parse } from "coap-packet"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { MAX_COAP_PAYLOAD_BYTES } from "../../src/adapters/coap/handler.ts"
import { MAX_EVENT_DATA_BYTES } from "../../src/ingest/schemas.ts"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { coapAgent, coapCall, type CoapCall, type CoapTestApp, rawPeer, startCoapApp } from "../support/coap.ts"

describe("CoAP over UDP", () => {
  let t: CoapTestApp
  let agent: Agent
  let deviceId: string
  let deviceKey: string
  let otherDeviceId: string
  const logs: Array<string> = []
  const coap = (call: CoapCall) => coapCall(agent, t.coapPort, call)
  const post = (path: string, body: unknown) => coap({ path, payload: typeof body === "string" ? body : JSON.stringify(body) })
  const app = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  const eventCount = async (id = deviceId) => (await app("GET", `/events?device.id=${id}&limit=200`)).body.count as number

  beforeAll(async () => {
    t = await startCoapApp({}, logs)
    agent = coapAgent()
    const space = await app("POST", "/spaces", { name: "Site" })
    const device = await app("POST", "/devices", { name: "Meter", space: { id: space.body.id } })
    deviceId = device.body.id
    deviceKey = device.body.secretKey
    otherDeviceId = (await app("POST", "/devices", { name: "Other", space: { id: space.body.id } })).body.id
  })
  afterAll(async () => {
    agent?.close()
    await t?.close()
  })

  it("stores an event posted with the device key and answers 2.01 with it", async () => {
    const before = Date.now()
    const res = await post("/events", { accessToken: deviceKey, name: "temperature", data: { celsius: 21.5 } })
    expect(res.code).toBe("2.01")
    expect(res.headers["Content-Format"]).toBe("application/json")
    expect(res.body).toMatchObject({ name: "temperature", data: { celsius: 21.5 }, device: { id: deviceId } })
    expect(res.body.id).toMatch(/^evt_/)
    expect(res.body.timestamp).toBeGreaterThanOrEqual(before)
    expect((await app("GET", `/events/${res.body.id}`)).body).toEqual(res.body)
    const list = await app("GET", `/events?device.id=${deviceId}&name=temperature`)
    expect(list.body.events.map((e: { id: string }) => e.id)).toEqual([res.body.id])
  })

  it("takes the timestamp from the payload and answers a non-confirmable request too", async () => {
    const res = await coap({
      path: "/events",
      confirmable: false,
      payload: JSON.stringify({ accessToken: deviceKey, name: "door", data: "open", timestamp: 1_700_000_000_000 })
    })
    expect(res.code).toBe("2.01")
    expect(res.body).toMatchObject({ name: "door", data: "open", timestamp: 1_700_000_000_000 })
  })

  it("stores a location with coordinates returned as strings", async () => {
    const res = await post("/locations", { accessToken: deviceKey, latitude: "53.3498", longitude: -6.2603, altitude: 12 })
    expect(res.code).toBe("2.01")
    expect(res.body).toMatchObject({ latitude: "53.3498", longitude: "-6.2603", altitude: "12", device: { id: deviceId } })
    expect((await app("GET", `/locations/${res.body.id}`)).body).toEqual(res.body)
  })

  it("lets an application key publish by naming the device", async () => {
    const res = await post("/events", { accessToken: BOOTSTRAP_KEY, name: "door", data: "closed", "device.id": otherDeviceId })
    expect(res.code).toBe("2.01")
    expect(res.body.device.id).toBe(otherDeviceId)
    const named = await post("/events", { accessToken: BOOTSTRAP_KEY, name: "door", device: { customId: "gate-9" } })
    expect(named.code).toBe("2.01")
  })

  it("answers each refusal with its code and a JSON error naming the field, storing nothing", async () => {
    const before = await eventCount()
    const cases: Array<[CoapCall, string, string | undefined]> = [
      [{ path: "/events", payload: "{not json" }, "4.00", "body"],
      [{ path: "/events", payload: "" }, "4.00", "body"],
      [{ path: "/events", payload: "[1,2]" }, "4.00", "body"],
      [{ path: "/events", payload: JSON.stringify({ accessToken: deviceKey, data: 1 }) }, "4.00", "name"],
      [{ path: "/events", payload: JSON.stringify({ accessToken: deviceKey, name: "a/b" }) }, "4.00", "name"],
      [{ path: "/events", payload: JSON.stringify({ accessToken: deviceKey, name: "x", timestamp: "soon" }) }, "4.00", "timestamp"],
      [{ path: "/locations", payload: JSON.stringify({ accessToken: deviceKey, latitude: 91, longitude: 0 }) }, "4.00", "latitude"],
      [{ path: "/events", payload: JSON.stringify({ accessToken: 42, name: "x" }) }, "4.00", "accessToken"],
      [{ path: "/events", payload: JSON.stringify({ name: "x" }) }, "4.01", undefined],
      [{ path: "/events", payload: JSON.stringify({ accessToken: "d_sk_not_a_real_key", name: "x" }) }, "4.01", undefined],
      [{ path: "/events", payload: JSON.stringify({ accessToken: "garbage", name: "x" }) }, "4.01", undefined],
      [{ path: "/events", payload: JSON.stringify({ accessToken: deviceKey, name: "x", device: { id: otherDeviceId } }) }, "4.03", undefined],
      [{ path: "/events", payload: JSON.stringify({ accessToken: BOOTSTRAP_KEY, name: "x", device: { id: "dev_unknown" } }) }, "4.04", undefined],
      [{ path: "/nothing", payload: JSON.stringify({ accessToken: deviceKey, name: "x" }) }, "4.04", undefined],
      [{ path: "/events/extra", payload: "{}" }, "4.04", undefined],
      [{ path: "/events", method: "GET" }, "4.05", undefined],
      [{ path: "/events", method: "PUT", payload: JSON.stringify({ accessToken: deviceKey, name: "x" }) }, "4.05", undefined],
      [{ path: "/locations", method: "DELETE" }, "4.05", undefined],
      [{ path: "/events", payload: "{}", options: { "Content-Format": "application/cbor" } }, "4.15", undefined]
    ]
    for (const [call, code, field] of cases) {
      const res = await coap(call)
      const label = `${call.method ?? "POST"} ${call.path} ${String(call.payload)}`
      expect(res.code, label).toBe(code)
      expect(res.body.error.status, label).toBe(code)
      expect(res.body.error.message, label).toEqual(expect.any(String))
      if (field !== undefined) expect(res.body.error.field, label).toBe(field)
    }
    expect(await eventCount()).toBe(before)
  })

  it("refuses event data beyond MAX_EVENT_DATA_BYTES sent block-wise with 4.13 and Size1", async () => {
    const before = await eventCount()
    const data = "x".repeat(MAX_EVENT_DATA_BYTES)
    const res = await coap({ path: "/events", blockwise: true, payload: JSON.stringify({ accessToken: deviceKey, name: "blob", data }) })
    expect(res.code).toBe("4.13")
    expect(res.headers.Size1).toBe(MAX_EVENT_DATA_BYTES)
    expect(await eventCount()).toBe(before)
  })

  it("stores an event larger than a datagram sent block-wise, answering without its data", async () => {
    const data = "y".repeat(100 * 1024)
    const res = await coap({ path: "/events", blockwise: true, payload: JSON.stringify({ accessToken: deviceKey, name: "blob", data }) })
    expect(res.code).toBe("2.01")
    expect(res.body.data).toBeUndefined()
    expect(res.text.length).toBeLessThan(1024)
    expect((await app("GET", `/events/${res.body.id}`)).body.data).toBe(data)
  })

  it("refuses a block-wise transfer reaching past the payload limit at once", async () => {
    const peer = await rawPeer(t.coapPort)
    try {
      // Block1 NUM 300 of 1024-byte blocks, more to come: 300 KiB in, beyond the limit.
      const block1 = Buffer.from([(300 >> 4) & 0xff, ((300 & 0xf) << 4) | 0x8 | 6])
      await peer.send(generate({
        messageId: 7,
        token: Buffer.from("b1", "hex"),
        confirmable: true,
        code: "POST",
        options: [{ name: "Uri-Path", value: Buffer.from("events") }, { name: "Block1", value: block1 }],
        payload: Buffer.alloc(1024, 0x20)
      }))
      const [answer] = await peer.next()
      const packet = parse(answer)
      expect(packet).toMatchObject({ code: "4.13", ack: true, messageId: 7 })
      expect(packet.token.toString("hex")).toBe("b1")
      const size1 = packet.options.find((o) => o.name === "Size1")
      expect(size1?.value.readUIntBE(0, size1.value.length)).toBe(MAX_COAP_PAYLOAD_BYTES)
    } finally {
      await peer.close()
    }
  })

  it("answers whole even when Block2 asks for small blocks, and refuses a later block before storing", async () => {
    const before = await eventCount()
    const peer = await rawPeer(t.coapPort)
    try {
      const request = (messageId: number, block2: number) =>
        generate({
          messageId,
          token: Buffer.of(messageId),
          confirmable: true,
          code: "POST",
          options: [{ name: "Uri-Path", value: Buffer.from("events") }, { name: "Block2", value: Buffer.of(block2) }],
          payload: Buffer.from(JSON.stringify({ accessToken: deviceKey, name: "small-blocks", data: "d".repeat(200) }))
        })
      await peer.send(request(21, 0x00)) // NUM 0, 16-byte blocks
      const whole = parse((await peer.next())[0])
      expect(whole.code).toBe("2.01")
      expect(whole.options.find((o) => o.name === "Block2")).toBeUndefined()
      expect(JSON.parse(whole.payload.toString()).data).toBe("d".repeat(200))
      await peer.send(request(22, 0x10)) // NUM 1
      expect(parse((await peer.next())[0]).code).toBe("4.02")
      expect(await eventCount()).toBe(before + 1)
    } finally {
      await peer.close()
    }
  })

  it("answers a GET with Observe like any GET, without registering an observer", async () => {
    const peer = await rawPeer(t.coapPort)
    try {
      await peer.send(generate({
        messageId: 31,
        token: Buffer.of(31),
        confirmable: true,
        code: "GET",
        options: [{ name: "Observe", value: Buffer.alloc(0) }, { name: "Uri-Path", value: Buffer.from("events") }]
      }))
      const reply = parse((await peer.next())[0])
      expect(reply).toMatchObject({ code: "4.05", ack: true, messageId: 31 })
      expect(reply.options.find((o) => o.name === "Observe")).toBeUndefined()
    } finally {
      await peer.close()
    }
  })

  it("stores a retransmitted confirmable request once and answers every copy alike", async () => {
    const before = await eventCount()
    const peer = await rawPeer(t.coapPort)
    try {
      const datagram = generate({
        messageId: 0x4242,
        token: Buffer.from("cafe0001", "hex"),
        confirmable: true,
        code: "POST",
        options: [{ name: "Uri-Path", value: Buffer.from("events") }],
        payload: Buffer.from(JSON.stringify({ accessToken: deviceKey, name: "pulse", data: 1 }))
      })
      // Two copies at once (the second, if it comes while the first is stored, is ignored:
      // the answer is yet to come), then a third once it is answered.
      await peer.send(datagram)
      await peer.send(datagram)
      const [first] = await peer.next()
      for (const copy of await peer.settle(100)) expect(copy).toEqual(first)
      await peer.send(datagram)
      const [third] = await peer.next()
      expect(third).toEqual(first)
      const reply = parse(first)
      expect(reply).toMatchObject({ code: "2.01", ack: true, messageId: 0x4242 })
      expect(reply.token.toString("hex")).toBe("cafe0001")
      const event = JSON.parse(reply.payload.toString())
      expect(await eventCount()).toBe(before + 1)
      expect((await app("GET", `/events/${event.id}`)).status).toBe(200)
      // A new message ID is a new request.
      await peer.send(generate({ ...parse(datagram), messageId: 0x4243 }))
      const [fresh] = await peer.next()
      expect(JSON.parse(parse(fresh).payload.toString()).id).not.toBe(event.id)
      expect(await eventCount()).toBe(before + 2)
    } finally {
      await peer.close()
    }
  })

  it("stores a retransmitted non-confirmable request once", async () => {
    const before = await eventCount()
    const peer = await rawPeer(t.coapPort)
    try {
      const datagram = generate({
        messageId: 0x5151,
        token: Buffer.from("0b", "hex"),
        confirmable: false,
        code: "POST",
        options: [{ name: "Uri-Path", value: Buffer.from("events") }],
        payload: Buffer.from(JSON.stringify({ accessToken: deviceKey, name: "pulse", data: 2 }))
      })
      await peer.send(datagram)
      await peer.send(datagram)
      const [first] = await peer.next()
      for (const copy of await peer.settle(100)) expect(copy).toEqual(first)
      await peer.send(datagram)
      expect(await peer.next()).toEqual([first])
      expect(parse(first)).toMatchObject({ code: "2.01", confirmable: false, ack: false })
      expect(await eventCount()).toBe(before + 1)
    } finally {
      await peer.close()
    }
  })

  it("takes a request with a message ID already seen from the same endpoint as a copy, whatever its token", async () => {
    const before = await eventCount()
    const peer = await rawPeer(t.coapPort)
    const other = await rawPeer(t.coapPort)
    try {
      const request = (token: string, data: number) =>
        generate({
          messageId: 0x6161,
          token: Buffer.from(token, "hex"),
          confirmable: true,
          code: "POST",
          options: [{ name: "Uri-Path", value: Buffer.from("events") }],
          payload: Buffer.from(JSON.stringify({ accessToken: deviceKey, name: "pulse", data }))
        })
      await peer.send(request("aa01", 1))
      const [first] = await peer.next()
      expect(parse(first)).toMatchObject({ code: "2.01", ack: true, messageId: 0x6161 })
      // RFC 7252 §4.5: endpoint and message ID make the copy; it gets the same ACK again, first token and all.
      await peer.send(request("bb02", 2))
      expect(await peer.next()).toEqual([first])
      expect(await eventCount()).toBe(before + 1)
      // The same message ID from another endpoint is another message.
      await other.send(request("aa01", 3))
      const [fresh] = await other.next()
      expect(JSON.parse(parse(fresh).payload.toString()).id).not.toBe(JSON.parse(parse(first).payload.toString()).id)
      expect(await eventCount()).toBe(before + 2)
    } finally {
      await peer.close()
      await other.close()
    }
  })

  it("refuses a request with a critical option it does not understand with 4.02, storing nothing", async () => {
    const before = await eventCount()
    const peer = await rawPeer(t.coapPort)
    try {
      const request = (messageId: number, option: number, confirmable = true) =>
        generate({
          messageId,
          token: Buffer.of(messageId),
          confirmable,
          code: "POST",
          options: [{ name: "Uri-Path", value: Buffer.from("events") }, { name: String(option), value: Buffer.of(1) }],
          payload: Buffer.from(JSON.stringify({ accessToken: deviceKey, name: "critical", data: option }))
        })
      // 9 (OSCORE) and 2049 are critical (odd, RFC 7252 §5.4.1); coap-packet names both.
      for (const [messageId, option] of [[41, 9], [42, 2049], [43, 19]]) {
        await peer.send(request(messageId, option))
        const reply = parse((await peer.next())[0])
        expect(reply, `option ${option}`).toMatchObject({ code: "4.02", ack: true, messageId })
        expect(reply.token).toEqual(Buffer.of(messageId))
        expect(JSON.parse(reply.payload.toString()).error).toMatchObject({ status: "4.02", code: "bad_option" })
        expect(JSON.parse(reply.payload.toString()).error.message).toContain(`option ${option}:`)
      }
      // A Non-confirmable one is rejected: ignored (RFC 7252 §4.3).
      await peer.send(request(44, 9, false))
      expect(await peer.settle(200)).toEqual([])
      // Not a forward-proxy: 5.05 to Proxy-Uri (RFC 7252 §5.7.2).
      await peer.send(request(45, 35))
      expect(parse((await peer.next())[0])).toMatchObject({ code: "5.05", ack: true, messageId: 45 })
      expect(await eventCount()).toBe(before)
      // Elective options (even numbers) not understood are ignored; Uri-Query is understood.
      for (const [messageId, option] of [[46, 2048], [47, 258], [48, 15]]) {
        await peer.send(request(messageId, option))
        expect(parse((await peer.next())[0]), `option ${option}`).toMatchObject({ code: "2.01", messageId })
      }
      expect(await eventCount()).toBe(before + 3)
    } finally {
      await peer.close()
    }
  })

  it("logs one line per refused request, naming the peer, the code and the reason", async () => {
    const peer = await rawPeer(t.coapPort)
    const from = `127.0.0.1:${peer.port}`
    try {
      const request = (messageId: number, payload: unknown, options: Array<{ name: string; value: Buffer }> = []) =>
        generate({
          messageId,
          token: Buffer.of(messageId),
          confirmable: true,
          code: "POST",
          options: [{ name: "Uri-Path", value: Buffer.from("events") }, ...options],
          payload: Buffer.from(JSON.stringify(payload))
        })
      const refused = [
        request(51, { accessToken: "d_sk_not_a_real_key", name: "x" }),
        request(52, { accessToken: deviceKey, name: "x" }, [{ name: "2049", value: Buffer.alloc(0) }]),
        request(53, { accessToken: deviceKey, name: "x" }, [{ name: "Block2", value: Buffer.of(0x10) }])
      ]
      for (const datagram of refused) {
        await peer.send(datagram)
        await peer.next()
        // A copy is answered from the cache and not logged again.
        await peer.send(datagram)
        await peer.next()
      }
      const expected = [
        `coap POST /events from ${from} refused 4.01: not authenticated: the credential is unknown, expired or revoked`,
        `coap POST /events from ${from} refused 4.02: option 2049: critical, and not understood by this server (RFC 7252 §5.4.1); send the request without it`,
        `coap POST /events from ${from} refused 4.02: Block2: the response has no such block; repeat the request without Block2`
      ]
      await vi.waitFor(() => expect(logs.filter((line) => line.includes(from))).toEqual(expected))
      await new Promise((resolve) => setTimeout(resolve, 100))
      expect(logs.filter((line) => line.includes(from))).toEqual(expected)
    } finally {
      await peer.close()
    }
  })

  it("logs datagrams it drops at most once per peer per 10 s", async () => {
    const peer = await rawPeer(t.coapPort)
    const from = `127.0.0.1:${peer.port}`
    try {
      for (let i = 0; i < 20; i++) await peer.send(Buffer.from([0x80, 0x02, 0x00, i])) // version 2
      await peer.send(Buffer.from("hello, this is not CoAP at all"))
      await vi.waitFor(() => expect(logs.filter((line) => line.includes(from))).toHaveLength(1))
      await new Promise((resolve) => setTimeout(resolve, 100))
      expect(logs.filter((line) => line.includes(from))).toEqual([`coap datagram from ${from} dropped: malformed (RFC 7252 §3): CoAP version 2, not 1`])
    } finally {
      await peer.close()
    }
  })

  it("drops or resets datagrams that are not CoAP requests and keeps serving", async () => {
    const peer = await rawPeer(t.coapPort)
    try {
      const garbage = [
        Buffer.from("hello, this is not CoAP at all"),
        Buffer.from([0x01]),
        Buffer.alloc(0),
        Buffer.from([0x80, 0x02, 0x00, 0x01]), // version 2
        Buffer.from([0x50, 0x02, 0x00, 0x02, 0xff]), // NON with an empty payload after the marker
        Buffer.from([0x60, 0x45, 0x00, 0x03]), // an ACK carrying 2.05 we never asked for
        Buffer.from([0x40, 0x02, 0x00, 0x04, 0xf0]), // CON with a reserved option nibble
        Buffer.from([0x49, 0x02, 0x00, 0x05]), // CON with token length 9
        Buffer.from([0x40, 0x45, 0x00, 0x06]), // CON response: no context
        Buffer.from([0x40, 0x00, 0x00, 0x07]) // CoAP ping
      ]
      for (const datagram of garbage) await peer.send(datagram)
      // Format errors in Confirmable messages, a stray CON response and a ping are reset
      // (RFC 7252 §4.2, §4.3); everything else is ignored. Each answer goes out on receipt.
      const resets = await peer.next(4)
      expect(resets.map((d) => d.toString("hex"))).toEqual(["70000004", "70000005", "70000006", "70000007"])
      const res = await post("/events", { accessToken: deviceKey, name: "still-alive" })
      expect(res.code).toBe("2.01")
      expect(await peer.next(0)).toEqual([])
    } finally {
      await peer.close()
    }
  })
})
