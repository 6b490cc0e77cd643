/**
 * Continuation tokens: the resolved query and where the next page starts, as base64url
 * JSON; a token is checked field by field before it is trusted.
 */
import { Buffer } from "node:buffer"
import { InvalidInput } from "../domain/errors.ts"
import { formatInterval, parseInterval } from "./buckets.ts"
import { type EnergyKind, FLOWS, type Flow, SOURCES, type Source } from "./readings.ts"
import { type Breakdown, invalid, isInstant, MAX_PAGE_BUCKETS, type Resolved, type Scope } from "./request.ts"
import { Zone } from "./zone.ts"

export const encodeToken = (q: Resolved, from: number): string =>
  Buffer.from(JSON.stringify({
    v: 1,
    k: q.kind,
    sc: q.scope.type === "organisation" ? null : [q.scope.type, q.scope.id],
    s: q.since ?? null,
    u: q.until,
    i: formatInterval(q.interval),
    tz: q.timezone,
    b: q.breakdown ?? null,
    src: q.source ?? null,
    f: q.flow,
    l: q.limit,
    r: q.rollups,
    c: from
  })).toString("base64url")

export const decodeToken = (token: string, kind: EnergyKind): Resolved | InvalidInput => {
  const bad = invalid("continuationToken", "is not a token this endpoint issued; start again without it")
  let t: Record<string, unknown>
  try {
    const parsed: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"))
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return bad
    t = parsed as Record<string, unknown>
  } catch {
    return bad
  }
  if (t.v !== 1 || t.k !== kind) return bad
  let scope: Scope = { type: "organisation" }
  if (t.sc !== null) {
    const sc = t.sc
    if (!Array.isArray(sc) || (sc[0] !== "space" && sc[0] !== "device") || typeof sc[1] !== "string") return bad
    scope = { type: sc[0], id: sc[1] }
  }
  const interval = typeof t.i === "string" ? parseInterval(t.i) : "missing"
  if (typeof interval === "string") return bad
  if (typeof t.tz !== "string" || Zone.of(t.tz) === undefined) return bad
  if (!(t.s === null || isInstant(t.s)) || !isInstant(t.u) || !isInstant(t.c)) return bad
  if (!(t.b === null || t.b === "device" || t.b === "country")) return bad
  if (!(t.src === null || (SOURCES as ReadonlyArray<unknown>).includes(t.src))) return bad
  if (!(FLOWS as ReadonlyArray<unknown>).includes(t.f)) return bad
  if (typeof t.l !== "number" || !Number.isSafeInteger(t.l) || t.l < 1 || t.l > MAX_PAGE_BUCKETS || typeof t.r !== "boolean") return bad
  return {
    kind,
    scope,
    since: t.s === null ? undefined : t.s as number,
    until: t.u,
    interval,
    timezone: t.tz,
    breakdown: t.b === null ? undefined : t.b as Breakdown,
    source: t.src === null ? undefined : t.src as Source,
    flow: t.f as Flow,
    limit: t.l,
    rollups: t.r,
    from: t.c
  }
}
