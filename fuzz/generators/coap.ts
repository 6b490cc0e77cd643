import { generate, type NamedOption, type Option } from "coap-packet"
import fc from "fast-check"
import {
  type Build,
  type EventParts,
  garbage,
  invalidEvent,
  invalidLocation,
  type LocationParts,
  type Meta,
  mutated,
  objectText,
  type Targets,
  validEvent,
  validLocation
} from "./common.ts"
import type { PayloadOptions } from "./payloads.ts"

/**
 * A CoAP input: a datagram built once its message id and token are known (so answers can be
 * matched), or, for mutated and random datagrams, bytes as they are.
 */
export interface CoapInput extends Meta {
  readonly datagram: (messageId: number, token: Buffer) => Buffer
}

const CONTENT_FORMAT = 12
const URI_PATH = 11

const uint = (n: number) => {
  const bytes: Array<number> = []
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256)
  return Buffer.from(bytes)
}

interface Request {
  readonly code: string
  readonly path: ReadonlyArray<string>
  /** Content-Format: 50 JSON, 0 text/plain, absent, or another number. */
  readonly format: number | undefined
  readonly extra: ReadonlyArray<Option>
  readonly payload: string
  readonly confirmable: boolean
}

const build = (r: Request) => (messageId: number, token: Buffer): Buffer => {
  const options: Array<Option | NamedOption> = r.path.map((segment) => ({ name: URI_PATH, value: Buffer.from(segment) }))
  if (r.format !== undefined) options.push({ name: CONTENT_FORMAT, value: uint(r.format) })
  options.push(...r.extra)
  // One UDP datagram carries at most 65,507 bytes; a longer invalid payload is cut (and stays invalid).
  const payload = Buffer.from(r.payload).subarray(0, 60_000)
  return generate({ code: r.code, messageId, token, confirmable: r.confirmable, options, payload }, 65_000)
}

/** Options a valid request may carry: none, or elective ones the server may ignore (RFC 7252 §5.4.1). */
const electiveOptions: fc.Arbitrary<ReadonlyArray<Option>> = fc.array(
  fc.oneof(
    fc.constant<Option>({ name: 17, value: uint(50) }), // Accept: application/json
    fc.uint8Array({ maxLength: 8 }).map((b): Option => ({ name: 4, value: Buffer.from(b) })), // ETag
    fc.tuple(fc.integer({ min: 1, max: 5 }), fc.uint8Array({ maxLength: 6 })).map(([n, b]): Option => ({ name: 2048 + n * 2, value: Buffer.from(b) })) // unassigned elective
  ),
  { maxLength: 2 }
)

/** Options that make a request wrong: unknown critical ones (RFC 7252 §5.4.1) and Proxy-Uri (§5.10.2). */
const wrongOptions: fc.Arbitrary<ReadonlyArray<Option>> = fc.array(
  fc.oneof(
    fc.tuple(fc.integer({ min: 0, max: 500 }), fc.uint8Array({ maxLength: 8 })).map(([n, b]): Option => ({ name: 2049 + n * 2, value: Buffer.from(b) })),
    fc.string({ maxLength: 30 }).map((s): Option => ({ name: 35, value: Buffer.from(s) }))
  ),
  { minLength: 1, maxLength: 3 }
)

/** Any options at all, for the odd device's requests: Block1, Uri-Query, Observe, random numbers and values. */
const anyOptions: fc.Arbitrary<ReadonlyArray<Option>> = fc.array(
  fc.tuple(fc.oneof(fc.constantFrom(1, 3, 4, 5, 6, 7, 8, 14, 15, 17, 23, 27, 28, 35, 39, 60, 258), fc.integer({ min: 0, max: 65_000 })), fc.uint8Array({ maxLength: 12 }))
    .map(([name, b]): Option => ({ name, value: Buffer.from(b) })),
  { maxLength: 4 }
)

const eventBody = (e: EventParts, seq: number, key: string) =>
  objectText([["accessToken", JSON.stringify(key)], ["name", e.name], ["data", e.data], ["timestamp", e.timestamp(seq)]])

const locationBody = (l: LocationParts, seq: number, key: string) =>
  objectText([["accessToken", JSON.stringify(key)], ["latitude", l.latitude], ["longitude", l.longitude], ["altitude", l.altitude], ["timestamp", l.timestamp(seq)]])

const bodyOf = (p: EventParts | LocationParts, seq: number, key: string) => ("latitude" in p ? locationBody(p, seq, key) : eventBody(p, seq, key))
const pathOf = (p: EventParts | LocationParts) => ["latitude" in p ? "locations" : "events"]

/** `POST /events` and `/locations` of the valid device, JSON or text/plain or no Content-Format. */
const validRequest: fc.Arbitrary<Build<CoapInput>> = fc.tuple(
  fc.oneof({ weight: 3, arbitrary: validEvent }, { weight: 1, arbitrary: validLocation }),
  fc.constantFrom<number | undefined>(50, 50, 0, undefined),
  electiveOptions,
  fc.boolean()
).map(([p, format, extra, confirmable]) => (t, seq) => ({
  marker: "valid",
  tagged: true,
  what: p.what,
  datagram: build({ code: "0.02", path: pathOf(p), format, extra, payload: bodyOf(p, seq, t.valid.key), confirmable })
}))

/** Known-invalid requests with the invalid device's key: bad payloads, methods, paths, formats and options. */
const invalidRequest = (options: PayloadOptions): fc.Arbitrary<Build<CoapInput>> =>
  fc.oneof(
    fc.tuple(fc.oneof({ weight: 3, arbitrary: invalidEvent(options) }, { weight: 1, arbitrary: invalidLocation(options) }), fc.boolean()).map(
      ([p, confirmable]): Build<CoapInput> => (t, seq) => ({
        marker: "invalid",
        invalid: p.invalid,
        tagged: p.tagged,
        what: p.what,
        datagram: build({ code: "0.02", path: pathOf(p), format: 50, extra: [], payload: bodyOf(p, seq, t.invalid.key), confirmable })
      })
    ),
    fc.tuple(validEvent, fc.integer({ min: 0, max: 5 }), wrongOptions).map(([e, how, extra]): Build<CoapInput> => (t, seq) => {
      const body = eventBody(e, seq, t.invalid.key)
      const request: Request =
        how === 0 ? { code: "0.01", path: ["events"], format: 50, extra: [], payload: body, confirmable: true } :
        how === 1 ? { code: "0.02", path: ["events", "x"], format: 50, extra: [], payload: body, confirmable: true } :
        how === 2 ? { code: "0.02", path: ["events"], format: 60, extra: [], payload: body, confirmable: true } :
        how === 3 ? { code: "0.02", path: ["events"], format: 50, extra, payload: body, confirmable: true } :
        how === 4 ? { code: "0.02", path: ["events"], format: 50, extra: [], payload: body.replace(/^\{/, "["), confirmable: true } :
        { code: "0.02", path: ["events"], format: 50, extra: [], payload: objectText([["accessToken", "42"], ["name", e.name], ["data", e.data]]), confirmable: true }
      return { marker: "invalid", invalid: "type", tagged: true, what: "event", datagram: build(request) }
    })
  )

/** A valid request of the odd device, as bytes with a fixed message id and token, to be mutated. */
const oddBytes: fc.Arbitrary<(t: Targets) => Buffer> = fc.tuple(fc.oneof(validEvent, validLocation), fc.oneof(electiveOptions, anyOptions)).map(
  ([p, extra]) => (t) => build({ code: "0.02", path: pathOf(p), format: 50, extra, payload: bodyOf(p, 0, t.odd.key), confirmable: true })(0x1234, Buffer.from("fuzzfuzz"))
)

export const coapInput = (options: PayloadOptions): fc.Arbitrary<Build<CoapInput>> =>
  fc.oneof(
    { weight: 5, arbitrary: validRequest },
    { weight: 4, arbitrary: invalidRequest(options) },
    {
      weight: 3,
      arbitrary: fc.oneof(
        { weight: 4, arbitrary: mutated(oddBytes).map((make) => ({ what: "mutated datagram", make })) },
        { weight: 1, arbitrary: garbage.map((bytes) => ({ what: "garbage", make: (_t: Targets) => bytes })) }
      ).map(({ what, make }): Build<CoapInput> => (t) => {
        const bytes = make(t)
        return { marker: "odd", tagged: false, what, datagram: () => bytes }
      })
    }
  )
