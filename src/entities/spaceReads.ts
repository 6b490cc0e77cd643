import { Effect } from "effect"
import type { SpaceJson } from "../store/spaces.ts"
import type { SqlClient } from "../store/Sql.ts"
import { Space } from "./protocol.ts"
import { ResidentSpaces } from "./residents.ts"

/**
 * What REST asks of Space entities, on whichever process it runs: the live counts of the spaces
 * it answers (`GetSpace`), and a reseed of the spaces a committed write changed (`Reseed`,
 * answered once the space has read the store again, so the caller's next read sees its write).
 */

/** Entities asked at once for one list. */
const CONCURRENCY = 16

/** The live counts a space's entity answers (`GetSpace`) and a list shows. */
export interface SpaceCounts {
  readonly devicesOnline: number
  readonly devicesOffline: number
  readonly openAlerts: number
}

/**
 * The live counts of these spaces, in their order: a space resident here is read in memory, at
 * once; only the others are asked through their owner, up to 16 at a time. (A fiber per space,
 * resident or not, cost more than the rest of a `GET /spaces` page answered from the cache.)
 */
export const liveOfSpaces = Effect.fnUntraced(function*(spaceIds: ReadonlyArray<string>) {
  const residents = yield* ResidentSpaces
  const lives = new Array<SpaceCounts>(spaceIds.length)
  let away: Array<number> | undefined
  for (let i = 0; i < spaceIds.length; i++) {
    const local = residents.get(spaceIds[i])
    if (local === undefined) (away ??= []).push(i)
    else lives[i] = local()
  }
  if (away !== undefined) {
    const client = yield* Space.client
    yield* Effect.forEach(away, (i) =>
      Effect.map(Effect.orDie(client(spaceIds[i]).GetSpace()), (live) => {
        lives[i] = live
      }), { concurrency: CONCURRENCY, discard: true })
  }
  return lives
})

/** The spaces as read, each with `live` from its entity: after `updatedAt`, before `alertUsers`. */
export const presentSpaces = Effect.fnUntraced(function*<S extends SpaceJson>(spaces: ReadonlyArray<S>) {
  const lives = yield* liveOfSpaces(spaces.map((space) => space.id))
  return spaces.map((space, i) => {
    const { devicesOnline, devicesOffline, openAlerts } = lives[i]
    const out = { ...space, live: { devicesOnline, devicesOffline, openAlerts } }
    const alertUsers = out.alertUsers
    if (alertUsers !== undefined) {
      // Moved behind `live`: the order of the store's space read.
      delete out.alertUsers
      out.alertUsers = alertUsers
    }
    return out
  })
})

/** Tells each space to read its devices, settings and recipients again; a failure is logged (the write stands). */
export const reseedSpaces = Effect.fnUntraced(function*(spaceIds: Iterable<string | null | undefined>) {
  const ids = new Set<string>()
  for (const id of spaceIds) if (id !== null && id !== undefined) ids.add(id)
  if (ids.size === 0) return
  const client = yield* Space.client
  const at = Date.now()
  yield* Effect.forEach(ids, (id) => client(id).Reseed({ at }), { concurrency: CONCURRENCY, discard: true })
}, (effect) => effect.pipe(Effect.catchCause((cause) => Effect.logWarning("space reseed failed", cause))))

/** The space a device is in now (none: gone, or in no space). */
export const spacesOfDevice = (sql: SqlClient, organisationId: string, deviceId: string) =>
  Effect.map(
    sql.query<{ space_id: string | null }>("SELECT space_id FROM devices WHERE id = $1 AND organisation_id = $2", [deviceId, organisationId]),
    (rows) => rows.flatMap((r) => (r.space_id === null ? [] : [r.space_id]))
  )

/** The spaces of devices with open alerts of these rules (whose deletion takes the alerts along). */
export const spacesWithOpenAlerts = (sql: SqlClient, organisationId: string, rules: { readonly ruleId?: string; readonly productId?: string }) =>
  Effect.map(
    sql.query<{ space_id: string }>(
      `SELECT DISTINCT d.space_id FROM alerts al JOIN alert_rules r ON r.id = al.alert_rule_id JOIN devices d ON d.id = al.device_id
       WHERE al.organisation_id = $1 AND al.resolved_at IS NULL AND d.space_id IS NOT NULL
         AND (r.id = $2 OR r.product_id = $3)`,
      [organisationId, rules.ruleId ?? null, rules.productId ?? null]
    ),
    (rows) => rows.map((r) => r.space_id)
  )

/** The spaces whose alert recipients include this organisation user. */
export const spacesOfRecipient = (sql: SqlClient, organisationUserId: string) =>
  Effect.map(
    sql.query<{ space_id: string }>("SELECT space_id FROM space_alert_users WHERE organisation_user_id = $1", [organisationUserId]),
    (rows) => rows.map((r) => r.space_id)
  )
