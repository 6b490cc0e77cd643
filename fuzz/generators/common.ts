import fc from "fast-check"
import {
  coordinate,
  energyData,
  type Fragment,
  hasInvalidData,
  invalidCoordinate,
  invalidData,
  invalidName,
  invalidTimestamp,
  type Invalidity,
  type PayloadOptions,
  validData,
  validName
} from "./payloads.ts"

/**
 * What the oracle knows of an input before it is sent:
 * - `valid`: valid by construction, aimed at the valid devices: it must be stored when acknowledged.
 * - `invalid`: breaks a known rule, aimed at the invalid device: nothing of it may be stored.
 * - `odd`: mutated bytes, garbage, random requests: only the answer is judged (no 5xx, no death).
 */
export type Marker = "valid" | "invalid" | "odd"

export interface Device {
  readonly id: string
  readonly key: string
}

/** The credentials and ids the inputs aim at, created through REST before the run. */
export interface Targets {
  readonly appKey: string
  /** Receives only valid inputs (and `VALID_CUSTOM_IDS` devices, created on the way). */
  readonly valid: Device
  /** Receives only known-invalid inputs: it must end with no events, locations or command runs. */
  readonly invalid: Device
  /** Receives mutated and random inputs. */
  readonly odd: Device
  /** A device only ever sent refused updates: its `updated_at` must not move. */
  readonly frozen: string
}

/** The command every target device has (created at seeding). */
export const COMMAND_SLUG = "reboot"

/** Devices an application names by customId in valid inputs (created on first use; a small pool). */
export const VALID_CUSTOM_IDS = ["fzv-c0", "fzv-c1", "fzv-c2"]
/** Prefix of names and customIds in known-invalid inputs: no stored row may carry it. */
export const INVALID_PREFIX = "fzx-"

/**
 * Every tagged input carries `TAG_BASE + seq` as its timestamp, so a stored row tells which
 * input made it (2017-07-14 onwards: far from the receipt time of an untagged one).
 */
export const TAG_BASE = 1_500_000_000_000
export const stamp = (seq: number) => TAG_BASE + seq

export interface Meta {
  readonly marker: Marker
  /** The rule a known-invalid input breaks. */
  readonly invalid?: Invalidity | undefined
  /** Its stored row would carry `stamp(seq)`. */
  readonly tagged: boolean
  /** What it is, for the report (`event`, `location`, `subscribe`, `garbage`…). */
  readonly what: string
}

/** A generated input, made concrete once the targets and its sequence number are known. */
export type Build<A> = (targets: Targets, seq: number) => A

/** A timestamp JSON text carrying the tag: epoch ms as a number, a string of digits, or ISO-8601. */
export const tagText = (seq: number, form: number): string =>
  form === 0 ? String(stamp(seq)) : form === 1 ? JSON.stringify(String(stamp(seq))) : JSON.stringify(new Date(stamp(seq)).toISOString())

const tagForm = fc.integer({ min: 0, max: 2 })

/** JSON object text from pre-encoded member texts (so invalid fragments stay as they are). */
export const objectText = (members: ReadonlyArray<readonly [string, string | undefined]>): string =>
  `{${members.filter(([, v]) => v !== undefined).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`

/** The parts of an event; `name`, `data` and `timestamp` are JSON texts. */
export interface EventParts extends Meta {
  readonly name: string
  readonly data: string
  /** Undefined: the server's time (untagged). */
  readonly timestamp: (seq: number) => string | undefined
}

const energyNames = fc.constantFrom("electricity", "gas", "water")

export const validEvent: fc.Arbitrary<EventParts> = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(validName, validData) },
  { weight: 1, arbitrary: fc.tuple(energyNames, energyData) }
).chain(([name, data]) =>
  tagForm.map((form): EventParts => ({
    marker: "valid",
    tagged: true,
    what: "event",
    name: JSON.stringify(name),
    data,
    timestamp: (seq) => tagText(seq, form)
  }))
)

/** An event breaking one rule in its name, data or timestamp. */
export const invalidEvent = (options: PayloadOptions): fc.Arbitrary<EventParts> =>
  fc.oneof(
    ...(hasInvalidData(options)
      ? [{ weight: 4, arbitrary: fc.tuple(validName.map((n) => JSON.stringify(n)), invalidData(options)).map(([name, d]) => [name, d.text, undefined, d] as const) }]
      : []),
    { weight: 2, arbitrary: fc.tuple(invalidName(options), validData).map(([n, data]) => [n.text, data, undefined, n] as const) },
    { weight: 1, arbitrary: fc.tuple(validName.map((n) => JSON.stringify(n)), invalidTimestamp(options)).map(([name, t]) => [name, "1", t.text, t] as const) },
    { weight: 1, arbitrary: fc.tuple(energyNames, fc.constantFrom('"lots"', '{"value":-1}', '{"value":1,"flow":"sideways"}', '{"meter":"x"}', "[]")).map(([n, d]) => [JSON.stringify(n), d, undefined, { text: d, invalid: "type" }] as const) }
  ).chain(([name, data, timestamp, why]: readonly [string, string, string | undefined, Fragment]) =>
    tagForm.map((form): EventParts => ({
      marker: "invalid",
      invalid: why.invalid,
      tagged: timestamp === undefined,
      what: "event",
      name,
      data,
      timestamp: (seq) => timestamp ?? tagText(seq, form)
    }))
  )

export interface LocationParts extends Meta {
  readonly latitude: string
  readonly longitude: string
  readonly altitude: string | undefined
  readonly timestamp: (seq: number) => string
}

export const validLocation: fc.Arbitrary<LocationParts> = fc.tuple(
  coordinate(-90, 90),
  coordinate(-180, 180),
  fc.option(coordinate(-100_000, 1_000_000), { nil: undefined }),
  tagForm
).map(([latitude, longitude, altitude, form]) => ({
  marker: "valid",
  tagged: true,
  what: "location",
  latitude,
  longitude,
  altitude,
  timestamp: (seq) => tagText(seq, form)
}))

/** Latitude, longitude and altitude ranges (`src/ingest/schemas.ts`). */
const RANGES: ReadonlyArray<readonly [number, number]> = [[-90, 90], [-180, 180], [-100_000, 1_000_000]]

export const invalidLocation = (options: PayloadOptions): fc.Arbitrary<LocationParts> =>
  fc.tuple(fc.integer({ min: 0, max: 2 }), coordinate(-180, 180), tagForm).chain(([where, good, form]) =>
    invalidCoordinate(options, ...RANGES[where]).map((bad): LocationParts => ({
      marker: "invalid",
      invalid: bad.invalid,
      tagged: true,
      what: "location",
      latitude: where === 0 ? bad.text : "1",
      longitude: where === 1 ? bad.text : good,
      altitude: where === 2 ? bad.text : undefined,
      timestamp: (seq) => tagText(seq, form)
    }))
  )

/** Command-run data: valid, or breaking a rule (then aimed at the invalid device). */
export const commandData = (options: PayloadOptions): fc.Arbitrary<{ readonly data: string; readonly why: Fragment | undefined }> =>
  hasInvalidData(options)
    ? fc.oneof(validData.map((data) => ({ data, why: undefined })), invalidData(options).map((why) => ({ data: why.text, why })))
    : validData.map((data) => ({ data, why: undefined }))

/** Byte-level mutations: flips, overwrites, inserts, deletes, truncations and repeats, at fractions of the length. */
export type Mutations = ReadonlyArray<readonly [op: number, at: number, byte: number]>

export const mutations: fc.Arbitrary<Mutations> = fc.array(
  fc.tuple(fc.integer({ min: 0, max: 5 }), fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }), fc.integer({ min: 0, max: 255 })),
  { minLength: 1, maxLength: 4 }
)

export const applyMutations = (original: Buffer, steps: Mutations): Buffer => {
  let out = Buffer.from(original)
  for (const [op, at, byte] of steps) {
    const i = Math.floor(at * out.length)
    if (op === 0 && out.length > 0) out[i] ^= 1 << (byte % 8)
    else if (op === 1 && out.length > 0) out[i] = byte
    else if (op === 2) out = Buffer.concat([out.subarray(0, i), Buffer.of(byte), out.subarray(i)])
    else if (op === 3 && out.length > 1) out = Buffer.concat([out.subarray(0, i), out.subarray(i + 1)])
    else if (op === 4 && out.length > 1) out = out.subarray(0, Math.max(1, i))
    else if (op === 5) out = Buffer.concat([out, out.subarray(i, i + 1 + (byte % 16))])
  }
  return out
}

/** Bytes known only once the targets are, mutated. */
export const mutated = (bytes: fc.Arbitrary<(t: Targets) => Buffer>): fc.Arbitrary<(t: Targets) => Buffer> =>
  fc.tuple(bytes, mutations).map(([make, steps]) => (t) => applyMutations(make(t), steps))


/** Random bytes, mostly short. */
export const garbage: fc.Arbitrary<Buffer> = fc.oneof(
  { weight: 4, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 64 }) },
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 64, maxLength: 2048 }) }
).map((bytes) => Buffer.from(bytes))
