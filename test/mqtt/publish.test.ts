import { Exit } from "effect"
import { describe, expect, it } from "vitest"
import { decode as decodePublish } from "../../src/adapters/mqtt/publish.ts"
import { InvalidInput } from "../../src/domain/errors.ts"
import { eventInput } from "../../src/ingest/schemas.ts"

const decode = (topic: string, payload: string | Uint8Array) => {
  const request = decodePublish(topic, payload)
  return request instanceof InvalidInput ? Exit.fail(request) : Exit.succeed(request)
}
const decoded = (topic: string, payload: string | Uint8Array) => {
  const exit = decode(topic, payload)
  if (Exit.isFailure(exit)) throw new Error(`${topic} ${String(payload)}: ${String(exit.cause)}`)
  return exit.value
}
const dataOf = (topic: string, payload: string | Uint8Array): unknown => {
  const { input } = decoded(topic, payload)
  return "data" in input ? input.data : undefined
}
const refusedField = (topic: string, payload: string | Uint8Array) => {
  const exit = decode(topic, payload)
  if (Exit.isSuccess(exit)) throw new Error(`${topic} ${String(payload)} was accepted`)
  const error = exit.cause.reasons.find((r) => r._tag === "Fail")
  return error?._tag === "Fail" ? error.error.field : undefined
}

describe("MQTT publish payloads (API-DECISIONS \"MQTT\")", () => {
  it("reads {data, timestamp?} on a device's event topic and any other JSON value as the data", () => {
    expect(decoded("devices/dev_1/events/t", '{"data":{"c":1},"timestamp":5}')).toEqual({
      kind: "event",
      device: { id: "dev_1" },
      input: { name: "t", data: { c: 1 }, timestamp: 5 }
    })
    expect(decoded("devices/dev_1/events/t", "21.5").input).toMatchObject({ name: "t", data: 21.5 })
    expect(dataOf("devices/dev_1/events/t", "null")).toBeNull()
    expect(dataOf("devices/dev_1/events/t", '"on"')).toBe("on")
    expect(dataOf("devices/dev_1/events/t", "[1,2]")).toEqual([1, 2])
    expect(dataOf("devices/dev_1/events/t", '{"data":1,"unit":"W"}')).toEqual({ data: 1, unit: "W" })
    expect(dataOf("devices/dev_1/events/t", '{"timestamp":5}')).toEqual({ timestamp: 5 })
    expect(refusedField("devices/dev_1/events/t", '{"data":1,"timestamp":"yesterday"}')).toBe("timestamp")
  })

  it("takes on a device's event topic exactly what the eventInput schema takes (the hand-checked common case)", () => {
    const payloads = [
      '{"data":1}', '{"data":1,"timestamp":0}', '{"data":1,"timestamp":1700000000000}', '{"data":1,"timestamp":-1}',
      '{"data":1,"timestamp":1.5}', '{"data":1,"timestamp":8640000000000000}', '{"data":1,"timestamp":8640000000000001}',
      '{"data":1,"timestamp":"2024-01-02T03:04:05Z"}', '{"data":1,"timestamp":"nope"}', '{"data":1,"timestamp":null}',
      '{"data":1,"timestamp":1e300}', '{"data":null}', '{"data":{"x":[1,"a"]}}', '{"timestamp":5}', "[]", '"x"', "0"
    ]
    for (const name of ["t", "x".repeat(200), "x".repeat(201), "é"]) {
      for (const payload of payloads) {
        const value: unknown = JSON.parse(payload)
        const fields = typeof value === "object" && value !== null && !Array.isArray(value) && "data" in value ? value : { data: value }
        const expected = eventInput.safeParse({ ...fields, name })
        const exit = decode(`devices/dev_1/events/${name}`, payload)
        expect(Exit.isSuccess(exit), `${name.slice(0, 5)} ${payload}`).toBe(expected.success)
        if (Exit.isSuccess(exit) && expected.success) {
          expect(exit.value.input).toMatchObject({ name: expected.data.name, timestamp: expected.data.timestamp })
          expect("data" in exit.value.input ? exit.value.input.data : undefined).toEqual(expected.data.data)
        }
      }
    }
  })

  it("reads the name from the payload on the short events topic", () => {
    expect(decoded("events", '{"name":"door","data":"open"}')).toMatchObject({ kind: "event", device: undefined, input: { name: "door", data: "open" } })
    expect(decoded("events", '{"name":"door","device":{"id":"dev_2"}}').device).toEqual({ id: "dev_2" })
    expect(refusedField("events", '{"data":1}')).toBe("name")
    expect(refusedField("events", '{"name":"a/b"}')).toBe("name")
  })

  it("reads locations, the topic naming the device", () => {
    expect(decoded("devices/dev_1/locations", '{"latitude":"1.5","longitude":2,"device":{"id":"dev_9"}}')).toMatchObject({
      kind: "location",
      device: { id: "dev_1" },
      input: { latitude: 1.5, longitude: 2 }
    })
    expect(decoded("locations", '{"latitude":1,"longitude":2}').device).toBeUndefined()
    expect(refusedField("locations", '{"latitude":91,"longitude":0}')).toBe("latitude")
  })

  it("reads command runs by topic and by the short topic", () => {
    expect(decoded("devices/dev_1/commands/reboot", '{"data":{"delay":5}}')).toEqual({
      kind: "command",
      device: { id: "dev_1" },
      input: { slug: "reboot", data: { delay: 5 } }
    })
    expect(dataOf("devices/dev_1/commands/reboot", "5")).toBe(5)
    expect(decoded("commands", '{"slug":"reboot","device":{"id":"dev_1"},"data":1}')).toMatchObject({
      kind: "command",
      device: { id: "dev_1" },
      input: { slug: "reboot", data: 1 }
    })
  })

  it("refuses bytes that are not JSON and topics that are not publish topics", () => {
    expect(refusedField("devices/dev_1/events/t", "")).toBe("payload")
    expect(refusedField("devices/dev_1/events/t", "not json")).toBe("payload")
    expect(refusedField("devices/dev_1/events/t", new Uint8Array([0x22, 0xff, 0x22]))).toBe("payload")
    for (const topic of ["devices/dev_1/events", "devices/dev_1/commands/reboot/run", "devices/dev_1", "$SYS/x", "other"]) {
      expect(refusedField(topic, "1"), topic).toBe("topic")
    }
  })
})
