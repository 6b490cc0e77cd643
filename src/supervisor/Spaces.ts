import { Context, Effect, Layer, Queue, Schedule, Schema } from "effect"
import { type Actor, createActor } from "xstate"
import { type SpaceContext, type SpaceCountEvent, spaceMachine } from "../../actors/spaceMachine.ts"
import { Bus } from "../bus/Bus.ts"
import { num, str } from "../store/rows.ts"
import { type SpaceJson, spaceCountsSql } from "../store/spaces.ts"
import { Sql, type SqlError } from "../store/Sql.ts"

/**
 * Hosts one `spaceMachine` actor per space that is read, in every process that reads it: the
 * live counts of `GET /spaces` and `GET /spaces/{id}` (devices online and offline, open
 * alerts), with the space's timezone and alert recipients as last read.
 *
 * - Activation on first read: one query counts every space of the read that has no actor,
 *   with the same numbers as counting `device_actors` snapshots and open alerts in SQL.
 * - Fed by the transitions the supervisor applied (`onSpaceChanges`: devices online, offline,
 *   out of the counts; alerts opened and auto-resolved) and by `PUT /alerts/{id}/resolve`
 *   (`changed`): applied here at once, and broadcast on the bus (`spaces.changed`) to every
 *   other process, whose space actors apply them too. A device's actor lives on whichever
 *   process sees its traffic; its space's counts follow on all of them.
 * - Recount: every RESYNC_EVERY all hosted spaces are recounted with one query, and an
 *   organisation's spaces whenever its devices were written (moved, deleted: `recount`, and
 *   the `devices.changed` bus notice in the other processes). The bus is at-most-once, so a
 *   lost broadcast is repaired by the next recount.
 * - Passivation: a space not read for IDLE_AFTER_MS leaves memory at the next recount; a
 *   change for a space without an actor is dropped (its activation counts it from the store).
 *
 * Consistency. Every change is told after the store committed it, stamped `at` from the
 * clock of the process that applied it, read after the commit. A count records when its query
 * started (`countedFrom`): a change with `at` before that is already in the count and is
 * skipped; changes arriving while a count runs are kept and applied again on top of it when
 * their `at` is not before its start. So on one process (and on processes whose clocks agree)
 * a change is counted once, except one that commits within the instant a count query takes
 * its snapshot (counted twice until the next recount). Across processes the counts follow a
 * transition as soon as the bus delivers it (milliseconds), and within RESYNC_EVERY when a
 * broadcast was lost or clocks disagree. Counts never go negative.
 */

/** A change of a space's counts, applied to the store before it is told. */
export interface SpaceChange {
  readonly spaceId: string
  readonly event: SpaceCountEvent
}

/** The live counts of `GET /spaces`. */
export interface SpaceLive {
  readonly devicesOnline: number
  readonly devicesOffline: number
  readonly openAlerts: number
}

export interface SpacesService {
  /**
   * The spaces as read, each with `live` from its actor (activated if needed), after the actor
   * took the timezone and alert recipients read with it.
   */
  present<S extends SpaceJson>(spaces: ReadonlyArray<S>): Effect.Effect<Array<S & { live: SpaceLive }>, SqlError>
  /** Changes this process committed before `at`: applied here now and told to every other process. */
  changed(at: number, changes: ReadonlyArray<SpaceChange>): Effect.Effect<void>
  /** Devices of an organisation were moved or deleted: recount its hosted spaces here. */
  recount(organisationId: string): Effect.Effect<void>
  /** The context of a space's actor here, if it has one (tests). */
  readonly context: (spaceId: string) => SpaceContext | undefined
  /** Space actors in memory. */
  readonly active: () => number
}

/** How often every hosted space is recounted from the store. */
const RESYNC_EVERY = "10 seconds"
/** Space actors not read for this long leave memory. */
const IDLE_AFTER_MS = 5 * 60 * 1000
/** Spaces counted per query. */
const COUNT_CHUNK = 1000

interface Hosted {
  readonly organisationId: string
  readonly actor: Actor<typeof spaceMachine>
  /** When the query of the count in place started: changes from before it are in it. */
  countedFrom: number
  lastReadAt: number
}

/** A count in flight: the changes that arrive for its spaces meanwhile. */
interface Counting {
  readonly ids: ReadonlySet<string>
  readonly arrived: Array<{ readonly at: number; readonly change: SpaceChange }>
}

const optionalCount = { count: Schema.optionalKey(Schema.Number) }
const CountEvent = Schema.Union([
  Schema.Struct({ type: Schema.Literal("device.online"), was: Schema.Literals(["offline", "other"]), ...optionalCount }),
  Schema.Struct({ type: Schema.Literal("device.offline"), was: Schema.Literals(["online", "other"]), ...optionalCount }),
  Schema.Struct({ type: Schema.Literal("device.left"), was: Schema.Literals(["online", "offline"]), ...optionalCount }),
  Schema.Struct({ type: Schema.Literal("alert.opened"), ...optionalCount }),
  Schema.Struct({ type: Schema.Literal("alert.resolved"), ...optionalCount })
])
/** What another process broadcast: checked, since the bus carries untyped JSON. */
const SpacesChanged = Schema.Struct({
  type: Schema.Literal("spaces.changed"),
  origin: Schema.String,
  at: Schema.Number,
  changes: Schema.Array(Schema.Struct({ spaceId: Schema.String, event: CountEvent }))
})
const isSpacesChanged = Schema.is(SpacesChanged)

/** Identical changes of one space folded into one event with a count (a smaller broadcast). */
export const foldChanges = (changes: ReadonlyArray<SpaceChange>): Array<SpaceChange> => {
  const folded = new Map<string, { spaceId: string; event: SpaceCountEvent; count: number }>()
  for (const { spaceId, event } of changes) {
    const key = `${spaceId} ${event.type} ${"was" in event ? event.was : ""}`
    const found = folded.get(key)
    if (found === undefined) folded.set(key, { spaceId, event, count: event.count ?? 1 })
    else found.count += event.count ?? 1
  }
  return [...folded.values()].map(({ spaceId, event, count }) => ({ spaceId, event: { ...event, count } }))
}

const sameList = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) => a.length === b.length && a.every((v, i) => v === b[i])

const make = Effect.gen(function*() {
  const sql = yield* Sql
  const bus = yield* Bus
  const origin = crypto.randomUUID()
  const hosted = new Map<string, Hosted>()
  const counting = new Set<Counting>()
  const toRecount = yield* Queue.unbounded<string>()

  const apply = (at: number, changes: ReadonlyArray<SpaceChange>) => {
    for (const change of changes) {
      const space = hosted.get(change.spaceId)
      if (space !== undefined && at >= space.countedFrom) space.actor.send(change.event)
      for (const c of counting) if (c.ids.has(change.spaceId)) c.arrived.push({ at, change })
    }
  }

  /** Counts the spaces from the store: recounts the hosted ones, activates the others with `activate`. */
  const count = (ids: ReadonlyArray<string>, activate: boolean) =>
    Effect.forEach(
      Array.from({ length: Math.ceil(ids.length / COUNT_CHUNK) }, (_, i) => ids.slice(i * COUNT_CHUNK, (i + 1) * COUNT_CHUNK)),
      (chunk) => {
        const watch: Counting = { ids: new Set(chunk), arrived: [] }
        return Effect.gen(function*() {
          counting.add(watch)
          const startedAt = Date.now()
          const rows = yield* sql.query(spaceCountsSql, [chunk])
          const found = new Set<string>()
          for (const row of rows) {
            const spaceId = str(row, "id")
            found.add(spaceId)
            const counts = {
              devicesOnline: num(row, "devices_online"),
              devicesOffline: num(row, "devices_offline"),
              openAlerts: num(row, "open_alerts")
            }
            const settings = {
              timezone: str(row, "timezone"),
              recipients: Array.isArray(row.recipients) ? row.recipients.map(String) : []
            }
            let space = hosted.get(spaceId)
            if (space === undefined) {
              if (!activate) continue
              const actor = createActor(spaceMachine, { input: { spaceId, ...settings, ...counts } }).start()
              space = { organisationId: str(row, "organisation_id"), actor, countedFrom: startedAt, lastReadAt: Date.now() }
              hosted.set(spaceId, space)
            } else if (space.countedFrom > startedAt) {
              continue // a later count is in place already
            } else {
              space.actor.send({ type: "space.recounted", ...counts, ...settings })
              space.countedFrom = startedAt
            }
            // Arrived while counting and perhaps committed after the count's snapshot: on top.
            for (const { at, change } of watch.arrived) {
              if (change.spaceId === spaceId && at >= startedAt) space.actor.send(change.event)
            }
          }
          for (const spaceId of chunk) {
            const space = hosted.get(spaceId)
            if (space !== undefined && !found.has(spaceId)) {
              space.actor.stop()
              hosted.delete(spaceId)
            }
          }
        }).pipe(Effect.ensuring(Effect.sync(() => counting.delete(watch))))
      },
      { discard: true }
    )

  const recountOrganisations = (organisationIds: ReadonlySet<string>) =>
    Effect.suspend(() => {
      const ids = [...hosted].flatMap(([id, space]) => (organisationIds.has(space.organisationId) ? [id] : []))
      return count(ids, false)
    })

  const changed = (at: number, changes: ReadonlyArray<SpaceChange>) =>
    Effect.suspend(() => {
      if (changes.length === 0) return Effect.void
      const folded = foldChanges(changes)
      apply(at, folded)
      return bus.control({ type: "spaces.changed", origin, at, changes: folded })
    })

  yield* bus.onControl((message) => {
    if (message.type === "devices.changed") Queue.offerUnsafe(toRecount, message.organisationId)
    else if (message.type === "spaces.changed" && message.origin !== origin && isSpacesChanged(message)) apply(message.at, message.changes)
  })

  // Organisations whose devices changed in another process (or this one: harmless), together.
  yield* Effect.forkScoped(Effect.forever(
    Effect.gen(function*() {
      const first = yield* Queue.take(toRecount)
      const rest = yield* Queue.takeAll(toRecount)
      yield* recountOrganisations(new Set([first, ...rest]))
    }).pipe(Effect.catchCause((cause) => Effect.logWarning("space recount failed", cause)))
  ))

  // Passivation of spaces nobody reads, then a recount of the others.
  const resync = Effect.gen(function*() {
    const now = Date.now()
    for (const [id, space] of hosted) {
      if (now - space.lastReadAt > IDLE_AFTER_MS) {
        space.actor.stop()
        hosted.delete(id)
      }
    }
    yield* count([...hosted.keys()], false)
  })
  yield* Effect.forkScoped(Effect.repeat(
    resync.pipe(Effect.catchCause((cause) => Effect.logWarning("space resync failed", cause))),
    Schedule.spaced(RESYNC_EVERY)
  ))
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      for (const space of hosted.values()) space.actor.stop()
      hosted.clear()
    })
  )

  const present = <S extends SpaceJson>(spaces: ReadonlyArray<S>) =>
    Effect.gen(function*() {
      const missing = [...new Set(spaces.map((s) => s.id).filter((id) => !hosted.has(id)))]
      if (missing.length > 0) yield* count(missing, true)
      const now = Date.now()
      return spaces.map((space) => {
        const hostedSpace = hosted.get(space.id)
        let live: SpaceLive = { devicesOnline: 0, devicesOffline: 0, openAlerts: 0 }
        if (hostedSpace !== undefined) {
          hostedSpace.lastReadAt = now
          const context = hostedSpace.actor.getSnapshot().context
          const recipients = space.alertUsers?.map((u) => u.id)
          if (context.timezone !== space.timezone || (recipients !== undefined && !sameList(context.recipients, recipients))) {
            hostedSpace.actor.send({ type: "space.configured", timezone: space.timezone, ...(recipients === undefined ? {} : { recipients }) })
          }
          const { devicesOnline, devicesOffline, openAlerts } = hostedSpace.actor.getSnapshot().context
          live = { devicesOnline, devicesOffline, openAlerts }
        }
        // The shape of the store's space read: `live` after `updatedAt`, before `alertUsers`.
        const out = { ...space, live }
        const alertUsers = out.alertUsers
        if (alertUsers !== undefined) {
          delete out.alertUsers
          out.alertUsers = alertUsers
        }
        return out
      })
    })

  return Spaces.of({
    present,
    changed,
    recount: (organisationId) =>
      recountOrganisations(new Set([organisationId])).pipe(
        Effect.catchCause((cause) => Effect.logWarning("space recount failed", cause))
      ),
    context: (spaceId) => hosted.get(spaceId)?.actor.getSnapshot().context,
    active: () => hosted.size
  })
})

export class Spaces extends Context.Service<Spaces, SpacesService>()("voltaic/supervisor/Spaces") {
  static readonly layer = Layer.effect(Spaces, make)
}
