import { Clock, Context, Effect, Layer, Semaphore } from "effect"
import { Bus } from "../bus/Bus.ts"
import { Sql, type SqlError } from "../store/Sql.ts"

/**
 * The enabled alert rules of each organisation, read once and kept per process, for the device
 * buckets hosted here and for ingest (which leaves out of a `Seen` the event data no rule looks
 * at). A rules change drops an organisation's entry here and, through a bus notice
 * (`rules.changed`), in every other process; the notice is at-most-once, so an entry is also
 * re-read once it is older than TTL_MS: a lost notice leaves rules stale for that long at most.
 */
export interface Rule {
  readonly id: string
  readonly organisationId: string
  readonly name: string
  readonly type: "offline" | "threshold" | "anomaly"
  readonly autoResolve: boolean
  readonly config: Readonly<Record<string, unknown>>
  readonly productId: string | null
  readonly spaceId: string | null
}

/** Where a device is, as far as rules are concerned. */
export interface Place {
  readonly organisationId: string
  readonly spaceId: string | null
  readonly productId: string | null
}

export interface OrganisationRules {
  /** Changes at every read: a device configured from an older version re-derives its settings. */
  readonly version: number
  readonly rules: ReadonlyArray<Rule>
  readonly readAt: number
}

export const TTL_MS = 30_000

export const applies = (rule: Rule, place: Place) =>
  (rule.spaceId === null || rule.spaceId === place.spaceId) && (rule.productId === null || rule.productId === place.productId)

/** An offline rule's `afterSeconds` in ms (NaN for a rule without a finite one). */
export const offlineLimitMs = (rule: Rule): number => Number(rule.config.afterSeconds) * 1000

/**
 * The shortest `afterSeconds` of the offline rules that apply at `place` (without one: of them
 * all), in ms; null: no offline rule watches the device.
 */
export const offlineAfterMs = (rules: ReadonlyArray<Rule>, place?: Place): number | null => {
  let least: number | null = null
  for (const rule of rules) {
    if (rule.type !== "offline" || (place !== undefined && !applies(rule, place))) continue
    const ms = offlineLimitMs(rule)
    if (Number.isFinite(ms) && (least === null || ms < least)) least = ms
  }
  return least
}

/** The least limit of the offline rules that apply at `place` longer than `after` ms; null: none. */
export const nextOfflineLimitMs = (rules: ReadonlyArray<Rule>, place: Place, after: number): number | null => {
  let next: number | null = null
  for (const rule of rules) {
    if (rule.type !== "offline" || !applies(rule, place)) continue
    const ms = offlineLimitMs(rule)
    if (Number.isFinite(ms) && ms > after && (next === null || ms < next)) next = ms
  }
  return next
}

/** Whether a threshold or anomaly rule of these looks at events of this name (anywhere). */
export const watchesEvent = (rules: ReadonlyArray<Rule>, eventName: string) => {
  for (const rule of rules) if (rule.type !== "offline" && rule.config.eventName === eventName) return true
  return false
}

const toRule = (row: Record<string, unknown>): Rule => ({
  id: String(row.id),
  organisationId: String(row.organisation_id),
  name: String(row.name),
  type: row.type === "threshold" || row.type === "anomaly" ? row.type : "offline",
  autoResolve: row.auto_resolve === true,
  config: typeof row.config === "object" && row.config !== null ? (row.config as Record<string, unknown>) : {},
  productId: typeof row.product_id === "string" ? row.product_id : null,
  spaceId: typeof row.space_id === "string" ? row.space_id : null
})

export interface RulesService {
  /** Reads the rules of the organisations not held, or held longer than TTL_MS, with one query. */
  load(organisationIds: Iterable<string>): Effect.Effect<void, SqlError>
  /** The rules held for an organisation (after `load`). */
  get(organisationId: string): OrganisationRules | undefined
  /** Forgets an organisation's rules here (its next `load` reads them). */
  invalidate(organisationId: string): void
}

export class Rules extends Context.Service<Rules, RulesService>()("voltaic/entities/Rules") {
  static readonly layer = Layer.effect(
    Rules,
    Effect.gen(function*() {
      const sql = yield* Sql
      const bus = yield* Bus
      const held = new Map<string, OrganisationRules>()
      let versions = 0
      // One read at a time: the buckets a rules change reaches all ask at once, and the first read serves them all.
      const reading = yield* Semaphore.make(1)
      yield* bus.onControl((message) => {
        if (message.type === "rules.changed") held.delete(message.organisationId)
      })
      const missingOf = (organisationIds: Iterable<string>, now: number) => {
        const missing: Array<string> = []
        for (const id of organisationIds) {
          const entry = held.get(id)
          if ((entry === undefined || now - entry.readAt > TTL_MS) && !missing.includes(id)) missing.push(id)
        }
        return missing
      }
      const read = Effect.fnUntraced(function*(organisationIds: Iterable<string>) {
        const now = yield* Clock.currentTimeMillis
        const missing = missingOf(organisationIds, now)
        if (missing.length === 0) return
        const rows = yield* sql.query<Record<string, unknown>>(
          "SELECT * FROM alert_rules WHERE organisation_id = ANY($1::text[]) AND enabled",
          [missing]
        )
        const read = new Map(missing.map((id) => [id, [] as Array<Rule>]))
        for (const row of rows) read.get(String(row.organisation_id))?.push(toRule(row))
        for (const [id, rules] of read) held.set(id, { version: ++versions, rules, readAt: now })
      })
      // Checked first without the permit: the common case (all held) takes no lock.
      const load = (organisationIds: Iterable<string>) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const ids = [...organisationIds]
          return missingOf(ids, now).length === 0 ? Effect.void : reading.withPermits(1)(read(ids))
        })
      return Rules.of({
        load,
        get: (organisationId) => held.get(organisationId),
        invalidate: (organisationId) => {
          held.delete(organisationId)
        }
      })
    })
  )
}
