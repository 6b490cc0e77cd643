import fc from "fast-check"
import {
  type Build,
  COMMAND_SLUG,
  type EventParts,
  INVALID_PREFIX,
  invalidEvent,
  invalidLocation,
  type LocationParts,
  type Meta,
  objectText,
  type Targets,
  VALID_CUSTOM_IDS,
  validEvent,
  validLocation
} from "./common.ts"
import { badString, cleanString, hasInvalidData, invalidData, type PayloadOptions, validData, validName } from "./payloads.ts"

/** One HTTP request; `path` includes the query string. */
export interface RestInput extends Meta {
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body?: string | Buffer | undefined
}

const json = { "content-type": "application/json" }
const bearer = (key: string) => ({ authorization: `Bearer ${key}` })

/** How a request names its device: as the device (its key) or as the application (`device.id`, dotted or nested). */
const deviceRef = (how: number, t: Targets, device: { id: string; key: string }, customId: string | undefined) =>
  how === 0
    ? { headers: bearer(device.key), member: undefined }
    : {
      headers: how === 3 ? { "x-app-key": t.appKey } : bearer(t.appKey),
      member: how === 2
        ? ["device.id", JSON.stringify(device.id)] as const
        : ["device", objectText([customId === undefined ? ["id", JSON.stringify(device.id)] : ["customId", JSON.stringify(customId)]])] as const
    }

const eventRequest = (p: EventParts | LocationParts, how: number, customId: string | undefined, protoTop: boolean): Build<RestInput> => (t, seq) => {
  const device = p.marker === "valid" ? t.valid : t.invalid
  const ref = deviceRef(how, t, device, customId)
  const members: Array<readonly [string, string | undefined]> = "latitude" in p
    ? [["latitude", p.latitude], ["longitude", p.longitude], ["altitude", p.altitude], ["timestamp", p.timestamp(seq)]]
    : [["name", p.name], ["data", p.data], ["timestamp", p.timestamp(seq)]]
  if (ref.member !== undefined) members.push(ref.member)
  // A `__proto__` member at the top of the body (issue 15: REST dropped it, MQTT stored it).
  if (protoTop) members.unshift(["__proto__", '{"polluted":true}'])
  return {
    marker: p.marker,
    invalid: protoTop ? "proto" : p.invalid,
    tagged: p.tagged,
    what: p.what,
    method: "POST",
    path: "latitude" in p ? "/v1/locations" : "/v1/events",
    headers: { ...json, ...ref.headers },
    body: objectText(members)
  }
}

/** A valid event as an HTML form (API-DECISIONS "Wire format"). */
const formEvent: fc.Arbitrary<Build<RestInput>> = fc.tuple(validName, cleanString(0, 30)).map(([name, data]) => (t, seq) => ({
  marker: "valid",
  tagged: true,
  what: "event (form)",
  method: "POST",
  path: "/v1/events",
  headers: { "content-type": "application/x-www-form-urlencoded", ...bearer(t.appKey) },
  body: new URLSearchParams({ name, data, timestamp: String(1_500_000_000_000 + seq), "device.id": t.valid.id }).toString()
}))

const validTraffic: fc.Arbitrary<Build<RestInput>> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.tuple(fc.oneof({ weight: 3, arbitrary: validEvent }, { weight: 1, arbitrary: validLocation }), fc.integer({ min: 0, max: 3 }), fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(...VALID_CUSTOM_IDS) }))
      .map(([p, how, customId]) => eventRequest(p, how, how === 1 ? customId : undefined, false))
  },
  { weight: 1, arbitrary: formEvent }
)

const invalidTraffic = (options: PayloadOptions): fc.Arbitrary<Build<RestInput>> =>
  fc.tuple(fc.oneof({ weight: 3, arbitrary: invalidEvent(options) }, { weight: 1, arbitrary: invalidLocation(options) }), fc.integer({ min: 0, max: 3 }))
    .map(([p, how]) => eventRequest(p, how, undefined, false))

/** Other writes that must change nothing: the frozen device, new spaces and commands, customIds, command runs. */
const invalidWrites = (options: PayloadOptions): fc.Arbitrary<Build<RestInput>> => {
  const badText = fc.oneof(
    ...(["nul", "surrogate"] as const).filter((k) => !options.exclude.has(k)).map((k) => badString(k).map((s) => ({ text: JSON.stringify(INVALID_PREFIX + s), invalid: k }))),
    fc.constant({ text: JSON.stringify(INVALID_PREFIX + "x".repeat(300)), invalid: "type" as const })
  )
  /** `body(t, name, data)`: a bad name, or (where the resource has a JSON field) a good name and bad data. */
  const write = (what: string, method: string, path: (t: Targets) => string, body: (t: Targets, name: string, data: string | undefined) => string, hasData: boolean) =>
    fc.tuple(badText, invalidData(options), fc.boolean()).map(([name, data, badName]): Build<RestInput> => {
      const useName = badName || !hasData || data.invalid === undefined
      return (t) => ({
        marker: "invalid",
        invalid: useName ? name.invalid : data.invalid,
        tagged: false,
        what,
        method,
        path: path(t),
        headers: { ...json, ...bearer(t.appKey) },
        body: useName ? body(t, name.text, undefined) : body(t, JSON.stringify(`${INVALID_PREFIX}ok`), data.text)
      })
    })
  return fc.oneof(
    write("device update", "PUT", (t) => `/v1/devices/${t.frozen}`, (_t, name, data) => objectText([["name", name], ["meta", data === undefined ? undefined : `{"k":${data}}`]]), true),
    write("space", "POST", () => "/v1/spaces", (_t, name) => objectText([["name", name]]), false),
    write("command", "POST", () => "/v1/commands", (t, name) => objectText([["name", name], ["device", objectText([["id", JSON.stringify(t.invalid.id)]])]]), false),
    write("event by customId", "POST", () => "/v1/events", (_t, name, data) => objectText([["name", '"e"'], ["data", data ?? "1"], ["device", objectText([["customId", name]])]]), true),
    ...(hasInvalidData(options) ? [invalidData(options).map((why): Build<RestInput> => (t) => ({
      marker: "invalid",
      invalid: why.invalid,
      tagged: false,
      what: "command run",
      method: "POST",
      path: "/v1/commands/run",
      headers: { ...json, ...bearer(t.appKey) },
      body: objectText([["slug", JSON.stringify(COMMAND_SLUG)], ["device", objectText([["id", JSON.stringify(t.invalid.id)]])], ["data", why.text]])
    }))] : [])
  )
}

const validRun: fc.Arbitrary<Build<RestInput>> = validData.map((data) => (t) => ({
  marker: "valid",
  tagged: false,
  what: "command run",
  method: "POST",
  path: "/v1/commands/run",
  headers: { ...json, ...bearer(t.appKey) },
  body: objectText([["slug", JSON.stringify(COMMAND_SLUG)], ["device", objectText([["id", JSON.stringify(t.valid.id)]])], ["data", data]])
}))

/** Header values HTTP can carry (no CR, LF or NUL; Latin-1). */
const headerValue = fc.string({ unit: "binary-ascii", maxLength: 60 }).map((s) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, "")).map((s) => s.trim())
const headerName = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/)

const ROUTES = ["events", "locations", "commands", "commands/run", "devices", "devices/me", "spaces", "products", "places", "gateways",
  "apiKeys", "alerts", "alertRules", "notificationTemplates", "whoami", "organisations", "organisations/users", "teams",
  "energy/electricity", "energy/gas/readings", "auth/token", "oauth/token", "managementClients", "openapi.json"]

const QUERY_KEYS = ["limit", "page", "sort", "order", "since", "until", "device.id", "device.customId", "name", "space.id", "interval",
  "timezone", "breakdown", "current", "previous", "access_token", "continuationToken", "rollups", "unresolved"]

const queryString = fc.array(
  fc.tuple(fc.oneof(fc.constantFrom(...QUERY_KEYS), cleanString(0, 10)), fc.oneof(
    fc.constantFrom("0", "-1", "201", "20", "1e3", "ASC", "desc", "createdAt", "2025-01-01T00:00:00Z", "1735689600000", "1 day", "Europe/Paris", "device", "x"),
    cleanString(0, 30)
  )),
  { maxLength: 6 }
).map((pairs) => pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&"))

const oddBody = fc.oneof(
  fc.constant(undefined),
  jsonBody(),
  fc.uint8Array({ maxLength: 256 }).map((b) => Buffer.from(b)),
  fc.constantFrom("{", "[]", "null", '"x"', '{"a":1', "name=x&data=y", "--b\r\ncontent-disposition: form-data; name=\"file\"\r\n\r\nx\r\n--b--")
)

function jsonBody() {
  return fc.dictionary(fc.constantFrom("name", "data", "device", "device.id", "slug", "latitude", "timestamp", "space", "x"), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 })
    .map((o) => JSON.stringify(o))
}

/** Random method, path, query, headers and body; sometimes a very long URL. */
const oddRequest: fc.Arbitrary<Build<RestInput>> = fc.record({
  method: fc.constantFrom("GET", "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"),
  route: fc.oneof(fc.constantFrom(...ROUTES), cleanString(0, 20).map((s) => encodeURIComponent(s))),
  id: fc.option(fc.oneof(fc.constantFrom("odd", "valid", "dev_0", "evt_0"), cleanString(1, 20).map((s) => encodeURIComponent(s))), { nil: undefined }),
  query: queryString,
  long: fc.oneof({ weight: 30, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.integer({ min: 4_000, max: 100_000 }) }),
  auth: fc.constantFrom("app", "odd", "none", "garbage", "empty", "basic"),
  contentType: fc.constantFrom(undefined, "application/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b", "text/plain", "application/x-ndjson", "image/png"),
  extra: fc.dictionary(headerName, headerValue, { maxKeys: 3 }),
  body: oddBody
}).map((r) => (t: Targets): RestInput => {
  // The valid device is the oracle's: deleting it would delete what it counts as stored (and
  // refuse the valid traffic after it), so a random DELETE aims at the odd device instead.
  const id = r.id === "odd" || (r.id === "valid" && r.method === "DELETE") ? t.odd.id : r.id === "valid" ? t.valid.id : r.id
  const auth = r.auth === "app" ? bearer(t.appKey) : r.auth === "odd" ? bearer(t.odd.key) : r.auth === "garbage" ? bearer("a_sk_nope") : r.auth === "empty" ? { authorization: "Bearer " } : r.auth === "basic" ? { authorization: "Basic Og==" } : {}
  const query = r.long === undefined ? r.query : `${r.query}&q=${"a".repeat(r.long)}`
  const headers: Record<string, string> = { ...r.extra, ...auth, ...(r.contentType === undefined ? {} : { "content-type": r.contentType }) }
  delete headers["content-length"]
  delete headers["transfer-encoding"]
  delete headers.host
  return {
    marker: "odd",
    tagged: false,
    what: r.long === undefined ? "random request" : "long URL",
    method: r.method,
    path: `/v1/${r.route}${id === undefined ? "" : `/${id}`}${query === "" ? "" : `?${query}`}`,
    headers,
    body: r.method === "GET" || r.method === "HEAD" ? undefined : r.body
  }
})

export const restInput = (options: PayloadOptions): fc.Arbitrary<Build<RestInput>> =>
  fc.oneof(
    { weight: 10, arbitrary: validTraffic },
    { weight: 1, arbitrary: validRun },
    { weight: 8, arbitrary: invalidTraffic(options) },
    { weight: 3, arbitrary: invalidWrites(options) },
    ...(options.exclude.has("proto") ? [] : [{ weight: 1, arbitrary: validEvent.map((p) => eventRequest({ ...p, marker: "invalid" }, 1, undefined, true)) }]),
    { weight: 6, arbitrary: oddRequest }
  )
