import { Context, Data, Deferred, Duration, Effect, FiberMap, Layer, Queue, Schedule } from "effect"
import { type Actor, type ActorOptions, createActor } from "xstate"
import { type DeviceEmitted, deviceMachine } from "../../actors/deviceMachine.ts"
import { evaluateThreshold } from "../../actors/rules.ts"
import { type Liveness, livenessOf } from "../../actors/spaceMachine.ts"
import { Bus } from "../bus/Bus.ts"
import { Alert, alertEntityId, Clear, DeviceLiveness, Raise, Space } from "../entities/protocol.ts"
import { Activity, type DeviceActivity } from "../ingest/Activity.ts"
import { touchDevices } from "../store/devices.ts"
import { Sql, type SqlError } from "../store/Sql.ts"

/**
 * Hosts one `deviceMachine` actor per device that shows activity or has a pending offline
 * timer, and performs what the machines emit: raises and clears sent to the Alert entity of
 * each (rule, device), and each device's liveness to the Space entity of its space.
 *
 * Supervision, and why per shard. Each device id has exactly one actor, kept in the map of
 * its shard (hash of the id into SHARDS workers). Each shard is one fiber, held in a
 * `FiberMap` by shard number and restarted with backoff if it dies, with one bounded
 * mailbox (`Queue.bounded`). A fiber and a queue per device would cost more than the actor
 * itself at 100,000 devices (the aim is ≤ 10 KB per live actor) and would defeat batching;
 * per shard, a worker takes everything in its mailbox at once, activates the devices it does
 * not host with one query, steps their actors, and applies what they emitted with a few
 * statements. A device always lands on the same shard and a
 * shard applies its work in order, so one device's effects happen in order (its offline
 * before its online) while shards work side by side.
 *
 * - Activation on first message; passivation after PASSIVATE_AFTER_MS idle without a pending
 *   timer: the actor stops, its snapshot stays in `device_actors`, nothing stays in memory.
 * - Mailbox: `offer` (producers that can wait: MQTT CONNECT) suspends while it is full. The
 *   synchronous `publish` (Ingest, after its commit, with its client already answered) cannot
 *   wait: when the mailbox is full it coalesces the activity into the shard's overflow, one
 *   entry per device (latest sign of life; at most OVERFLOW_EVENTS events for rule evaluation,
 *   the oldest evaluations dropped and logged beyond that), drained after the mailbox.
 * - A failing actor (an action that throws: xstate puts it in its error state, no transition
 *   and no emission happen) is stopped and its messages held; a restart fiber (FiberMap keyed
 *   by device id) rehydrates it from its last persisted snapshot and replays the held
 *   messages, immediately and then with exponential backoff (`RESTART_SCHEDULE`) while the
 *   replay fails again; when the attempts run out the held messages are dropped (logged) and
 *   the actor restarts from the snapshot alone. Side effects are not replayed: effects come
 *   only from emissions, a failed transition emits nothing, and the snapshot of every device
 *   whose emissions were applied is written right after them.
 * - Snapshots are also written behind (every second) and rehydrated at start, so a device
 *   that fell silent while the process was down still goes offline on time.
 * - A plain sign of life (a stored event or location that no rule evaluates) reaching an actor
 *   that it would not move (online or unwatched) is only noted on the entry (`noteSeen`),
 *   without the mailbox, a step or a snapshot write: at thousands of events a second, stepping
 *   xstate for each cost ~40 µs and ~16 KB of short-lived garbage an event, and writing every
 *   moved snapshot each second cost Postgres a 1,000-row upsert. The noted time reaches the
 *   actor with the next sign of life it steps (which carries the newest time), before a rules
 *   change reconfigures it, and when its offline timer fires (the actor's clock asks first:
 *   `catchUp` re-arms the timer for what is left instead); a snapshot written without it is
 *   brought up to the device row's `last_seen_at`, which the same commit moved, when it is
 *   rehydrated.
 * - Space counts: a device whose liveness (online, offline, neither) differs from what its
 *   stored snapshot says is noted by its actor's observer; the shard writes its snapshot and
 *   `device_actors.liveness` with the step's other effects (never behind: the write-behind
 *   skips it meanwhile) and then sends `DeviceLiveness` to its space's entity, so a space seeded
 *   from the store is never behind a change it was told.
 */

interface Rule {
  readonly id: string
  readonly organisationId: string
  readonly name: string
  readonly type: "offline" | "threshold" | "anomaly"
  readonly autoResolve: boolean
  readonly config: Record<string, unknown>
  readonly productId: string | null
  readonly spaceId: string | null
}

interface Place {
  readonly organisationId: string
  readonly spaceId: string | null
  readonly productId: string | null
}

type DeviceMachine = typeof deviceMachine
type Clock = NonNullable<ActorOptions<DeviceMachine>["clock"]>

interface Hosted {
  readonly actor: Actor<DeviceMachine>
  readonly place: Place
  lastActiveAt: number
  /** Liveness as stored (its snapshot in `device_actors`) and told to the space listeners. */
  reported: Liveness
  /** The newest session sign of life (MQTT CONNECT/PINGREQ) not yet in the device's row. */
  unstoredSeenAt: number | null
  /**
   * The newest stored sign of life (an event or location, already in the device's row) that the
   * actor has not been sent: recorded without stepping it (`noteSeen`), sent before anything
   * else reaches the actor and before its offline timer fires (`catchUp`).
   */
  pendingSeenAt: number | null
}

export interface SupervisorService {
  /** Devices with a live actor now. */
  readonly active: () => number
  /** Rules of an organisation changed: re-read them and reconfigure its actors. */
  rulesChanged(organisationId: string): Effect.Effect<void>
  /** Waits until every activity handed over so far, and every emission so far, has been applied (tests, shutdown). */
  readonly settled: () => Promise<void>
}

export interface SupervisorOptions {
  /** Shard workers (each a fiber with its mailbox). */
  readonly shards?: number | undefined
  /** Capacity of each shard's mailbox. */
  readonly mailboxCapacity?: number | undefined
  /** The device machine (tests provide one whose actions fail). */
  readonly machine?: DeviceMachine | undefined
  /** Delays between restart attempts of a failed actor after the first, immediate one. */
  readonly restartSchedule?: Schedule.Schedule<unknown, unknown> | undefined
  /** Called at each restart attempt of a failed actor (1 for the first). */
  readonly onRestart?: ((deviceId: string, attempt: number) => void) | undefined
}

/** Idle actors without a pending timer leave memory after this; their snapshot stays. */
const PASSIVATE_AFTER_MS = 5 * 60 * 1000
const SNAPSHOT_EVERY = "1 second"
const SHARDS = 16
const MAILBOX_CAPACITY = 4096
/** Events per device kept for rule evaluation while its shard's mailbox is full. */
const OVERFLOW_EVENTS = 64
/** Messages held for a failed actor until its restart. */
const HELD_MAX = 64
/** Devices activated per query. */
const ACTIVATE_CHUNK = 5000
/** Actors started between two yields of the shard fiber. */
const ACTIVATE_YIELD_EVERY = 100
/** Messages a shard takes per round. */
const STEP_MAX = 512
/** 100 ms, 200 ms, 400 ms, 800 ms, 1.6 s between attempts; then the held messages are dropped. */
const RESTART_SCHEDULE = Schedule.max([Schedule.exponential("100 millis"), Schedule.recurs(5)])
/** A store that failed is retried without end, at most every 5 s: effects are not lost. */
const STORE_RETRY = Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("5 seconds")])
const SHARD_RESTART = Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("10 seconds")])

class ActorFailed extends Data.TaggedError("ActorFailed")<{ readonly deviceId: string }> {}
class ShardFailed extends Data.TaggedError("ShardFailed")<{ readonly shard: number }> {}

type Message =
  | { readonly _tag: "activity"; readonly activity: DeviceActivity }
  | { readonly _tag: "restart"; readonly deviceId: string; readonly dropHeld: boolean; readonly outcome: Deferred.Deferred<void, ActorFailed> }
  | { readonly _tag: "passivate"; readonly now: number }
  | { readonly _tag: "wake" }

/** What the shard must apply, in the order it happened. */
type Pending =
  | { readonly _tag: "emitted"; readonly place: Place; readonly emitted: DeviceEmitted }
  | {
    readonly _tag: "threshold"
    readonly rule: Rule
    readonly deviceId: string
    readonly verdict: "breach" | "clear"
    readonly at: number
    readonly event: NonNullable<DeviceActivity["event"]>
  }

interface Coalesced {
  readonly organisationId: string
  readonly deviceId: string
  /** Activities folded in here. */
  count: number
  seenAt: number
  /** The newest session sign of life folded in, if any. */
  sessionAt?: number | undefined
  readonly events: Array<DeviceActivity>
}

interface Failed {
  readonly held: Array<DeviceActivity>
}

interface Shard {
  readonly index: number
  readonly mailbox: Queue.Queue<Message>
  readonly hosted: Map<string, Hosted>
  readonly failed: Map<string, Failed>
  overflow: Map<string, Coalesced>
  effects: Array<Pending>
  /** Devices whose liveness left what their stored snapshot says: written and told with the next effects. */
  moved: Set<string>
  /** `moved` taken by the step being applied (the write-behind leaves them alone too). */
  applying: ReadonlySet<string>
  /** Failures of actors outside a step (a timer's transition threw). */
  crashed: Array<{ readonly deviceId: string; readonly actor: Actor<DeviceMachine>; readonly cause: unknown }>
  /** Failed devices whose restart fiber must start. */
  toRestart: Array<string>
  /** Logs and restart outcomes of a step, run after its effects. */
  after: Array<Effect.Effect<void>>
  /** Device being replayed by a restart: its failure is that restart's outcome. */
  replaying: string | undefined
  stepping: boolean
  wakeQueued: boolean
  droppedEvaluations: number
  /** Messages handed over / applied; emissions and failures pushed / applied (for `settled`). */
  seqIn: number
  doneIn: number
  seqFx: number
  doneFx: number
  waiters: Array<{ readonly in: number; readonly fx: number; readonly resolve: () => void }>
}

const WAKE: Message = { _tag: "wake" }

const applies = (rule: Rule, device: Place) =>
  (rule.spaceId === null || rule.spaceId === device.spaceId) && (rule.productId === null || rule.productId === device.productId)

/** FNV-1a of the id: which shard hosts a device. */
const shardIndex = (id: string, shards: number) => {
  let h = 0x811c9dc5
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0) % shards
}

const make = (options: SupervisorOptions = {}) =>
  Effect.gen(function*() {
    const sql = yield* Sql
    const bus = yield* Bus
    const activity = yield* Activity
    const machine = options.machine ?? deviceMachine
    const shardCount = options.shards ?? SHARDS
    const capacity = options.mailboxCapacity ?? MAILBOX_CAPACITY
    const restartSchedule = options.restartSchedule ?? RESTART_SCHEDULE
    const rules = new Map<string, Array<Rule>>()
    const dirty = new Set<string>()
    const alerts = yield* Alert.client
    const spaces = yield* Space.client
    const workers = yield* FiberMap.make<number>()
    const restarts = yield* FiberMap.make<string>()

    const shards: Array<Shard> = []
    for (let index = 0; index < shardCount; index++) {
      shards.push({
        index,
        mailbox: yield* Queue.bounded<Message>(capacity),
        hosted: new Map(),
        failed: new Map(),
        overflow: new Map(),
        effects: [],
        moved: new Set(),
        applying: new Set(),
        crashed: [],
        toRestart: [],
        after: [],
        replaying: undefined,
        stepping: false,
        wakeQueued: false,
        droppedEvaluations: 0,
        seqIn: 0,
        doneIn: 0,
        seqFx: 0,
        doneFx: 0,
        waiters: []
      })
    }
    const shardOf = (deviceId: string) => shards[shardIndex(deviceId, shardCount)]

    const wake = (shard: Shard) => {
      if (!shard.stepping && !shard.wakeQueued) shard.wakeQueued = Queue.offerUnsafe(shard.mailbox, WAKE)
    }

    // ---------------------------------------------------------------------------------
    // Rules, read once per organisation and kept (re-read when they change)

    const toRule = (organisationId: string) => (r: Record<string, unknown>): Rule => ({
      id: String(r.id),
      organisationId,
      name: String(r.name),
      type: r.type as Rule["type"],
      autoResolve: r.auto_resolve === true,
      config: (r.config ?? {}) as Record<string, unknown>,
      productId: (r.product_id as string | null) ?? null,
      spaceId: (r.space_id as string | null) ?? null
    })

    /** Reads the rules of the organisations not read yet (all of them with `reload`), one query. */
    const loadRules = (organisationIds: ReadonlyArray<string>, reload = false) =>
      Effect.gen(function*() {
        const missing = [...new Set(organisationIds)].filter((id) => reload || !rules.has(id))
        if (missing.length === 0) return
        const rows = yield* sql.query<Record<string, unknown>>(
          "SELECT * FROM alert_rules WHERE organisation_id = ANY($1::text[]) AND enabled",
          [missing]
        )
        const read = new Map(missing.map((id) => [id, [] as Array<Rule>]))
        for (const row of rows) {
          const organisationId = String(row.organisation_id)
          read.get(organisationId)?.push(toRule(organisationId)(row))
        }
        // Replaced at once: a step never sees an organisation without its rules.
        for (const [id, list] of read) rules.set(id, list)
      })

    const offlineAfterMs = (all: ReadonlyArray<Rule>, device: Place) => {
      const seconds = all.filter((r) => r.type === "offline" && applies(r, device)).map((r) => Number(r.config.afterSeconds))
      return seconds.length === 0 ? null : Math.min(...seconds) * 1000
    }

    // ---------------------------------------------------------------------------------
    // Activation: many devices, one query

    const load = (shard: Shard, ids: ReadonlyArray<string>, now: number) =>
      Effect.gen(function*() {
        const fresh = new Map<string, Hosted>()
        for (let i = 0; i < ids.length; i += ACTIVATE_CHUNK) {
          const rows = yield* sql.query<{
            id: string
            organisation_id: string
            space_id: string | null
            product_id: string | null
            last_seen_at: number | null
            snapshot: unknown
          }>(
            `SELECT d.id, d.organisation_id, d.space_id, d.product_id, d.last_seen_at, a.snapshot
             FROM devices d LEFT JOIN device_actors a ON a.device_id = d.id WHERE d.id = ANY($1::text[])`,
            [ids.slice(i, i + ACTIVATE_CHUNK)]
          )
          yield* loadRules(rows.map((r) => r.organisation_id))
          let started = 0
          for (const row of rows) {
            // Starting an actor costs tens of µs: let the sockets in between (a thousand at once stalled them ~100 ms).
            if (++started % ACTIVATE_YIELD_EVERY === 0) yield* Effect.yieldNow
            const place: Place = { organisationId: row.organisation_id, spaceId: row.space_id, productId: row.product_id }
            const limit = offlineAfterMs(rules.get(place.organisationId) ?? [], place)
            const deviceId = row.id
            const input = { deviceId, offlineAfterMs: limit }
            const owner: { actor?: Actor<DeviceMachine> } = {}
            const clock = timerClock(shard, deviceId, owner)
            const actor = row.snapshot
              ? createActor(machine, { input, clock, snapshot: row.snapshot as never })
              : createActor(machine, { input, clock })
            owner.actor = actor
            const entry: Hosted = {
              actor,
              place,
              lastActiveAt: now,
              reported: livenessOf(actor.getSnapshot().value),
              unstoredSeenAt: null,
              pendingSeenAt: null
            }
            actor.on("*", (emitted) => {
              shard.effects.push({ _tag: "emitted", place, emitted })
              shard.seqFx++
              wake(shard)
            })
            actor.subscribe({
              next: (snapshot) => {
                if (livenessOf(snapshot.value) === entry.reported || shard.moved.has(deviceId)) return
                shard.moved.add(deviceId)
                shard.seqFx++
                wake(shard)
              },
              error: (cause) => {
                // Inside a step the worker sees the error state itself; outside (a timer), tell it.
                if (shard.stepping) return
                shard.crashed.push({ deviceId, actor, cause })
                shard.seqFx++
                wake(shard)
              }
            })
            actor.start()
            if (row.snapshot) {
              // Signs of life noted but never sent (`noteSeen`) are in the device's row.
              const stored = row.last_seen_at
              if (stored !== null && stored > (actor.getSnapshot().context.lastSeenAt ?? -Infinity)) actor.send({ type: "device.seen", at: stored })
              actor.send({ type: "device.resumed", at: now })
              if (actor.getSnapshot().context.offlineAfterMs !== limit) actor.send({ type: "device.configured", offlineAfterMs: limit, at: now })
            }
            fresh.set(deviceId, entry)
          }
        }
        return fresh
      }).pipe(Effect.retry({ schedule: STORE_RETRY, while: (e) => e._tag === "SqlError" }))

    // ---------------------------------------------------------------------------------
    // A step: the messages a shard took in hand, applied to its actors (synchronous)

    const fail = (shard: Shard, deviceId: string, actor: Actor<DeviceMachine> | undefined, held: ReadonlyArray<DeviceActivity>, cause: unknown) => {
      const entry = shard.hosted.get(deviceId)
      if (entry !== undefined && (actor === undefined || entry.actor === actor)) {
        shard.hosted.delete(deviceId)
        entry.actor.stop()
      }
      dirty.delete(deviceId)
      const existing = shard.failed.get(deviceId)
      if (existing !== undefined) {
        existing.held.push(...held)
        return
      }
      shard.failed.set(deviceId, { held: [...held] })
      shard.after.push(Effect.logWarning(`device actor ${deviceId} failed; restarting it from its last snapshot`, cause))
      if (shard.replaying !== deviceId) shard.toRestart.push(deviceId)
    }

    const hold = (failed: Failed, a: DeviceActivity) => {
      failed.held.push(a)
      if (failed.held.length > HELD_MAX) failed.held.shift()
    }

    /** Sends one event; a failure (the actor's error state) hands the activity to its restart. */
    const send = (shard: Shard, deviceId: string, entry: Hosted, event: Parameters<Actor<DeviceMachine>["send"]>[0], a: DeviceActivity) => {
      try {
        entry.actor.send(event)
      } catch (cause) {
        fail(shard, deviceId, entry.actor, [a], cause)
        return false
      }
      const snapshot = entry.actor.getSnapshot()
      if (snapshot.status === "error") {
        fail(shard, deviceId, entry.actor, [a], snapshot.error)
        return false
      }
      return true
    }

    /** Whether a rule of the organisation looks at events of this name from this device (per event: no closure). */
    const evaluates = (all: ReadonlyArray<Rule>, place: Place, eventName: string) => {
      for (const r of all) {
        if ((r.type === "threshold" || r.type === "anomaly") && r.config.eventName === eventName && applies(r, place)) return true
      }
      return false
    }

    /**
     * Notes a plain sign of life (stored, and looked at by no rule) for an actor it would move
     * no further than its lastSeenAt (online or unwatched); false: the actor must step it.
     */
    const noteSeen = (entry: Hosted, a: DeviceActivity) => {
      if (a.session === true) return false
      const all = rules.get(entry.place.organisationId)
      if (all === undefined || (a.event !== undefined && evaluates(all, entry.place, a.event.name))) return false
      const value = entry.actor.getSnapshot().value
      if (value !== "online" && value !== "unwatched") return false
      entry.lastActiveAt = a.at
      if (entry.pendingSeenAt === null || a.at > entry.pendingSeenAt) entry.pendingSeenAt = a.at
      return true
    }

    /**
     * Sends the actor the sign of life noted for it, if any: outside a step (a timer, a rules
     * change), so a failure goes to the shard as a crash, like a timer's. It is told late
     * (`toldAt`): the timer it re-arms counts what is left of it.
     */
    const catchUp = (shard: Shard, deviceId: string, entry: Hosted) => {
      const at = entry.pendingSeenAt
      if (at === null) return
      entry.pendingSeenAt = null
      try {
        entry.actor.send({ type: "device.seen", at, toldAt: Date.now() })
      } catch (cause) {
        shard.crashed.push({ deviceId, actor: entry.actor, cause })
        shard.seqFx++
        wake(shard)
      }
    }

    /**
     * The clock of a device's actor. When its offline timer fires with a sign of life noted since
     * it was armed, the actor gets that first: seen before the deadline, the actor re-arms the
     * timer (the re-entry cancels the fired timeout) and the expiry is dropped; seen only after
     * it (the event loop was late), the device was offline in between, so the expiry goes first.
     */
    const timerClock = (shard: Shard, deviceId: string, owner: { actor?: Actor<DeviceMachine> }): Clock => ({
      setTimeout: (expire: () => void, ms: number) =>
        setTimeout(() => {
          const entry = shard.hosted.get(deviceId)
          if (entry === undefined || entry.actor !== owner.actor || entry.pendingSeenAt === null) return expire()
          const { lastSeenAt, offlineAfterMs } = entry.actor.getSnapshot().context
          if (lastSeenAt === null || offlineAfterMs === null || entry.pendingSeenAt > lastSeenAt + offlineAfterMs) expire()
          catchUp(shard, deviceId, entry)
        }, ms),
      clearTimeout: (id: ReturnType<typeof setTimeout>) => clearTimeout(id)
    })

    const stepActivity = (shard: Shard, a: DeviceActivity) => {
      const deviceId = a.deviceId
      const failed = shard.failed.get(deviceId)
      if (failed !== undefined) return hold(failed, a)
      const entry = shard.hosted.get(deviceId)
      if (entry === undefined) return // not a device (deleted meanwhile)
      if (noteSeen(entry, a)) return
      entry.lastActiveAt = a.at
      if (a.session === true && (entry.unstoredSeenAt === null || a.at > entry.unstoredSeenAt)) entry.unstoredSeenAt = a.at
      dirty.add(deviceId)
      // One sign of life carries the newest time noted or sent: the actor's lastSeenAt never goes back.
      const at = entry.pendingSeenAt !== null && entry.pendingSeenAt > a.at ? entry.pendingSeenAt : a.at
      entry.pendingSeenAt = null
      if (!send(shard, deviceId, entry, { type: "device.seen", at }, a)) return
      const event = a.event
      if (event === undefined) return
      const all = rules.get(entry.place.organisationId) ?? []
      const anomalyRules = all
        .filter((r) => r.type === "anomaly" && applies(r, entry.place) && r.config.eventName === event.name)
        .map((r) => ({
          id: r.id,
          eventName: String(r.config.eventName),
          path: r.config.path as string | undefined,
          window: Number(r.config.window),
          zScore: Number(r.config.zScore)
        }))
      if (anomalyRules.length > 0) {
        if (!send(shard, deviceId, entry, { type: "device.measured", at: a.at, eventName: event.name, data: event.data, rules: anomalyRules }, a)) return
      }
      for (const rule of all) {
        if (rule.type !== "threshold" || !applies(rule, entry.place)) continue
        const verdict = evaluateThreshold(
          {
            eventName: String(rule.config.eventName),
            path: rule.config.path as string | undefined,
            min: rule.config.min as number | undefined,
            max: rule.config.max as number | undefined
          },
          event.name,
          event.data
        )
        if (verdict !== "none") {
          shard.effects.push({ _tag: "threshold", rule, deviceId, verdict, at: a.at, event })
          shard.seqFx++
        }
      }
    }

    const step = (shard: Shard, messages: ReadonlyArray<Message>, fresh: Map<string, Hosted>) => {
      const completions = shard.after
      const crashed = shard.crashed.splice(0)
      shard.stepping = true
      try {
        for (const c of crashed) fail(shard, c.deviceId, c.actor, [], c.cause)
        for (const m of messages) {
          switch (m._tag) {
            case "activity": {
              const id = m.activity.deviceId
              if (!shard.hosted.has(id) && !shard.failed.has(id)) {
                const entry = fresh.get(id)
                if (entry === undefined) continue
                fresh.delete(id)
                shard.hosted.set(id, entry)
              }
              stepActivity(shard, m.activity)
              break
            }
            case "restart": {
              const failed = shard.failed.get(m.deviceId)
              const entry = fresh.get(m.deviceId)
              fresh.delete(m.deviceId)
              if (failed === undefined || entry === undefined) {
                entry?.actor.stop()
                shard.failed.delete(m.deviceId)
                completions.push(Deferred.succeed(m.outcome, undefined).pipe(Effect.asVoid))
                break
              }
              shard.failed.delete(m.deviceId)
              shard.hosted.set(m.deviceId, entry)
              dirty.add(m.deviceId)
              if (m.dropHeld) {
                if (failed.held.length > 0) {
                  completions.push(Effect.logWarning(`device actor ${m.deviceId}: ${failed.held.length} messages dropped after repeated failures`))
                }
              } else {
                shard.replaying = m.deviceId
                for (const a of failed.held) stepActivity(shard, a)
                shard.replaying = undefined
              }
              completions.push(
                (shard.failed.has(m.deviceId) ? Deferred.fail(m.outcome, new ActorFailed({ deviceId: m.deviceId })) : Deferred.succeed(m.outcome, undefined)).pipe(
                  Effect.asVoid
                )
              )
              break
            }
            case "passivate": {
              for (const [id, entry] of shard.hosted) {
                if (
                  entry.actor.getSnapshot().value !== "online" && m.now - entry.lastActiveAt > PASSIVATE_AFTER_MS && !dirty.has(id) &&
                  !shard.moved.has(id)
                ) {
                  entry.actor.stop()
                  shard.hosted.delete(id)
                }
              }
              break
            }
            case "wake":
              break
          }
        }
      } finally {
        shard.stepping = false
        shard.replaying = undefined
      }
      // Activated for nothing (their messages were held): not kept.
      for (const entry of fresh.values()) entry.actor.stop()
      return crashed.length
    }

    // ---------------------------------------------------------------------------------
    // Effects: what the actors emitted, applied in batches

    interface AlertRaise {
      readonly organisationId: string
      readonly ruleId: string
      readonly deviceId: string
      readonly at: number
      readonly event: NonNullable<DeviceActivity["event"]> | null
      readonly note: string
    }
    type Op =
      | { readonly kind: "raise"; readonly raise: AlertRaise }
      | { readonly kind: "clear"; readonly rule: Rule; readonly deviceId: string; readonly at: number }

    const toOps = (pending: ReadonlyArray<Pending>) => {
      /** Per (rule, device), in order: the i-th op of every key makes round i. */
      const byKey = new Map<string, Array<Op>>()
      const add = (ruleId: string, deviceId: string, op: Op) => {
        const key = `${ruleId} ${deviceId}`
        const list = byKey.get(key)
        if (list === undefined) byKey.set(key, [op])
        else list.push(op)
      }
      const raise = (rule: Rule, deviceId: string, at: number, event: AlertRaise["event"], note: string) =>
        add(rule.id, deviceId, { kind: "raise", raise: { organisationId: rule.organisationId, ruleId: rule.id, deviceId, at, event, note } })
      const clear = (rule: Rule, deviceId: string, at: number) => {
        if (rule.autoResolve) add(rule.id, deviceId, { kind: "clear", rule, deviceId, at })
      }
      for (const p of pending) {
        if (p._tag === "threshold") {
          if (p.verdict === "breach") raise(p.rule, p.deviceId, p.at, p.event, `${p.event.name} out of range`)
          else clear(p.rule, p.deviceId, p.at)
          continue
        }
        const emitted = p.emitted
        const all = rules.get(p.place.organisationId) ?? []
        if (emitted.type === "device.anomaly") {
          const rule = all.find((r) => r.id === emitted.ruleId)
          if (rule === undefined) continue
          if (emitted.verdict === "breach") {
            raise(rule, emitted.deviceId, emitted.at, null, `value ${emitted.z.toFixed(1)} standard deviations from its baseline`)
          } else {
            clear(rule, emitted.deviceId, emitted.at)
          }
          continue
        }
        for (const rule of all) {
          if (rule.type !== "offline" || !applies(rule, p.place)) continue
          if (emitted.type === "device.offline") {
            raise(rule, emitted.deviceId, emitted.at, null, `no sign of life since ${new Date(emitted.lastSeenAt ?? 0).toISOString()}`)
          } else {
            clear(rule, emitted.deviceId, emitted.at)
          }
        }
      }
      const rounds: Array<Array<Op>> = []
      for (const list of byKey.values()) {
        list.forEach((op, i) => (rounds[i] ??= []).push(op))
      }
      return rounds
    }

    /** Each (rule, device)'s raises and clears, in order, to its Alert entity (stored by the cluster before this goes on). */
    const applyRound = (round: ReadonlyArray<Op>) =>
      Effect.forEach(round, (op) => {
        if (op.kind === "raise") {
          const r = op.raise
          return alerts(alertEntityId(r.ruleId, r.deviceId)).Raise(
            new Raise({ key: `raise@${r.at}`, organisationId: r.organisationId, at: r.at, note: r.note, event: r.event }),
            { discard: true }
          )
        }
        return alerts(alertEntityId(op.rule.id, op.deviceId)).Clear(new Clear({ key: `clear@${op.at}`, at: op.at }), { discard: true })
      }, { concurrency: "unbounded", discard: true }).pipe(Effect.orDie)

    /**
     * A sign of life that stored nothing (an MQTT CONNECT or PINGREQ) moved the actor's
     * `lastSeenAt` but not the device's row, which REST reads: bring the row up to the actor
     * (events and locations already set it in their own commit, so they update nothing here)
     * and drop those devices from every process's cached reads. Only devices with such a sign
     * since the last write take part.
     */
    const recordSessionSigns = (entries: ReadonlyArray<readonly [string, Hosted]>) => {
      const seen = entries.flatMap(([id, entry]) => (entry.unstoredSeenAt === null ? [] : [[id, entry.unstoredSeenAt, entry] as const]))
      if (seen.length === 0) return Effect.void
      return touchDevices(sql, new Map(seen.map(([id, at]) => [id, at]))).pipe(
        Effect.flatMap((rows) => {
          // Stored: forget them unless a newer sign came meanwhile.
          for (const [, at, entry] of seen) if (entry.unstoredSeenAt === at) entry.unstoredSeenAt = null
          return rows.length === 0 ? Effect.void : bus.control({ type: "devices.seen", deviceIds: rows.map((r) => r.id) })
        })
      )
    }

    const writeSnapshots = (entries: ReadonlyArray<readonly [string, Hosted]>, now: number) =>
      entries.length === 0 ? Effect.void : sql.query(
        `INSERT INTO device_actors (device_id, snapshot, updated_at)
         SELECT u.id, u.snapshot::jsonb, $3 FROM unnest($1::text[], $2::text[]) AS u(id, snapshot)
         WHERE EXISTS (SELECT 1 FROM devices d WHERE d.id = u.id)
         ON CONFLICT (device_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at`,
        [entries.map((e) => e[0]), entries.map((e) => JSON.stringify(e[1].actor.getPersistedSnapshot())), now]
      ).pipe(Effect.asVoid)

    /** What the Space entities count, written before it is told: answers each device's space now. */
    const writeLiveness = (turned: ReadonlyArray<readonly [string, Liveness]>, at: number) =>
      sql.query<{ id: string; space_id: string | null }>(
        `WITH w AS (
           UPDATE device_actors SET liveness = u.liveness, liveness_at = $3
           FROM unnest($1::text[], $2::text[]) AS u(id, liveness) WHERE device_actors.device_id = u.id
           RETURNING device_actors.device_id)
         SELECT w.device_id AS id, d.space_id FROM w JOIN devices d ON d.id = w.device_id`,
        [turned.map((t) => t[0]), turned.map((t) => t[1]), at]
      )

    const applyEffects = (shard: Shard, pending: ReadonlyArray<Pending>, moved: ReadonlySet<string>) =>
      Effect.gen(function*() {
        if (pending.length === 0 && moved.size === 0) return
        const changes: Array<{ readonly spaceId: string; readonly deviceId: string; readonly liveness: Liveness; readonly at: number }> = []
        if (pending.length > 0) {
          yield* loadRules(pending.map((p) => p._tag === "emitted" ? p.place.organisationId : p.rule.organisationId))
          for (const round of toOps(pending)) yield* applyRound(round)
        }
        // Emitted and applied: written now, so a restart from the snapshot does not emit it again.
        const emitters = new Set(pending.flatMap((p) => p._tag === "emitted" ? [p.emitted.deviceId] : []))
        // Liveness changed: written now too, so the store's counts hold it before it is told.
        const turned: Array<{ readonly id: string; readonly entry: Hosted; readonly to: Liveness }> = []
        for (const id of moved) {
          const entry = shard.hosted.get(id)
          if (entry === undefined) continue
          const to = livenessOf(entry.actor.getSnapshot().value)
          if (to === entry.reported) continue
          turned.push({ id, entry, to })
          emitters.add(id)
        }
        const entries = [...emitters].flatMap((id) => {
          const entry = shard.hosted.get(id)
          return entry === undefined ? [] : [[id, entry] as const]
        })
        if (turned.length === 0) yield* writeSnapshots(entries, Date.now())
        else {
          // Written with their liveness, and the space each device is in now (it may have moved since its actor was activated).
          const at = Date.now()
          yield* writeSnapshots(entries, at)
          const rows = yield* writeLiveness(turned.map((t) => [t.id, t.to] as const), at)
          const spaceOf = new Map(rows.map((r) => [r.id, r.space_id]))
          for (const t of turned) {
            const spaceId = spaceOf.get(t.id)
            if (spaceId !== undefined && spaceId !== null) changes.push({ spaceId, deviceId: t.id, liveness: t.to, at })
            t.entry.reported = t.to
          }
        }
        yield* recordSessionSigns(entries)
        for (const [id] of entries) dirty.delete(id)
        yield* Effect.forEach(changes, (c) => spaces(c.spaceId).DeviceLiveness(
          new DeviceLiveness({ deviceId: c.deviceId, liveness: c.liveness, at: c.at }),
          { discard: true }
        ), { concurrency: "unbounded", discard: true }).pipe(Effect.orDie)
      }).pipe(
        Effect.tapError((e: SqlError) => Effect.logWarning(`supervisor: applying ${pending.length} effects failed, retrying: ${e.message}`)),
        Effect.retry({ schedule: STORE_RETRY, while: (e) => e._tag === "SqlError" })
      )

    // ---------------------------------------------------------------------------------
    // The shard worker

    const fromOverflow = (overflow: Map<string, Coalesced>): Array<Message> => {
      const out: Array<Message> = []
      for (const c of overflow.values()) {
        let last = -Infinity
        for (const a of c.events) {
          out.push({ _tag: "activity", activity: a })
          last = Math.max(last, a.at)
        }
        // A session's sign of life folded in is stored by the supervisor itself (a stored time
        // marked so only costs a row the update then leaves alone).
        if (c.seenAt > last) {
          const session = c.sessionAt === undefined ? undefined : true
          out.push({ _tag: "activity", activity: { organisationId: c.organisationId, deviceId: c.deviceId, at: c.seenAt, session } })
        }
      }
      return out
    }

    const iteration = (shard: Shard) =>
      Effect.gen(function*() {
        // At most STEP_MAX messages a round: a round steps its actors synchronously, and a long
        // one stalls every socket of the process (publish → subscriber latency).
        const taken = yield* Queue.takeBetween(shard.mailbox, 1, STEP_MAX)
        // Synchronous up to the first yield below: all handed over before `markIn` is in hand.
        shard.wakeQueued = false
        const messages: Array<Message> = taken.filter((m) => m._tag !== "wake")
        let takenIn = messages.length
        // The overflow holds what came after the mailbox filled up: only once it is empty.
        if (shard.overflow.size > 0 && Queue.sizeUnsafe(shard.mailbox) === 0) {
          const overflow = shard.overflow
          shard.overflow = new Map()
          for (const c of overflow.values()) takenIn += c.count
          for (const m of fromOverflow(overflow)) messages.push(m)
        }
        if (shard.droppedEvaluations > 0) {
          yield* Effect.logWarning(`supervisor shard ${shard.index}: mailbox full, ${shard.droppedEvaluations} event evaluations dropped (signs of life kept)`)
          shard.droppedEvaluations = 0
        }

        const missing = new Set<string>()
        for (const m of messages) {
          if (m._tag === "restart") missing.add(m.deviceId)
          else if (m._tag === "activity" && !shard.hosted.has(m.activity.deviceId) && !shard.failed.has(m.activity.deviceId)) {
            missing.add(m.activity.deviceId)
          }
        }
        const now = Date.now()
        const fresh = missing.size > 0 ? yield* load(shard, [...missing], now) : new Map<string, Hosted>()
        yield* loadRules(messages.flatMap((m) => m._tag === "activity" ? [m.activity.organisationId] : [])).pipe(
          Effect.retry({ schedule: STORE_RETRY, while: (e) => e._tag === "SqlError" })
        )
        const crashed = step(shard, messages, fresh)

        const pending = shard.effects
        shard.effects = []
        const moved = shard.moved
        shard.moved = new Set()
        shard.applying = moved
        const takenFx = crashed + pending.length + moved.size
        yield* applyEffects(shard, pending, moved)
        shard.applying = new Set()
        yield* Effect.all(shard.after.splice(0), { discard: true })
        for (const id of shard.toRestart.splice(0)) yield* FiberMap.run(restarts, id, superviseRestart(shard, id), { onlyIfMissing: true })

        shard.doneIn += takenIn
        shard.doneFx += takenFx
        if (shard.waiters.length > 0) {
          const waiting = shard.waiters
          shard.waiters = []
          for (const w of waiting) {
            if (shard.doneIn >= w.in && shard.doneFx >= w.fx) w.resolve()
            else shard.waiters.push(w)
          }
        }
      })

    const runShard = (shard: Shard) =>
      Effect.forever(iteration(shard)).pipe(
        Effect.catchDefect((defect) =>
          Effect.logError(`supervisor shard ${shard.index} failed; restarting it`, defect).pipe(
            Effect.andThen(Effect.fail(new ShardFailed({ shard: shard.index })))
          )
        ),
        Effect.retry(SHARD_RESTART)
      )

    /** Restarts a failed actor: at once, then with `restartSchedule` while the replay fails again. */
    const superviseRestart = (shard: Shard, deviceId: string) => {
      let attempt = 0
      const attemptOnce = (dropHeld: boolean) =>
        Effect.gen(function*() {
          attempt++
          options.onRestart?.(deviceId, attempt)
          const outcome = yield* Deferred.make<void, ActorFailed>()
          yield* enqueue(shard, { _tag: "restart", deviceId, dropHeld, outcome })
          yield* Deferred.await(outcome)
        })
      return attemptOnce(false).pipe(
        Effect.retry(restartSchedule),
        Effect.catchTag("ActorFailed", () => attemptOnce(true)),
        Effect.catchCause((cause) => Effect.logError(`device actor ${deviceId} could not be restarted`, cause))
      )
    }

    // ---------------------------------------------------------------------------------
    // Producers

    const coalesce = (shard: Shard, a: DeviceActivity) => {
      let c = shard.overflow.get(a.deviceId)
      if (c === undefined) {
        c = { organisationId: a.organisationId, deviceId: a.deviceId, count: 0, seenAt: a.at, events: [] }
        shard.overflow.set(a.deviceId, c)
      }
      c.count++
      c.seenAt = Math.max(c.seenAt, a.at)
      if (a.session === true) c.sessionAt = Math.max(c.sessionAt ?? a.at, a.at)
      if (a.event !== undefined) {
        c.events.push(a)
        if (c.events.length > OVERFLOW_EVENTS) {
          c.events.shift()
          shard.droppedEvaluations++
        }
      }
    }

    const publish = (a: DeviceActivity) => {
      const shard = shardOf(a.deviceId)
      // The common case, noted at once: no mailbox, no step (a hosted device is not a failed one).
      const entry = shard.hosted.get(a.deviceId)
      if (entry !== undefined && noteSeen(entry, a)) return
      shard.seqIn++
      if (shard.overflow.size === 0 && Queue.offerUnsafe(shard.mailbox, { _tag: "activity", activity: a })) return
      coalesce(shard, a)
    }

    /** Into the mailbox, suspending while it is full. */
    const enqueue = (shard: Shard, message: Message) =>
      Queue.offer(shard.mailbox, message).pipe(
        // Counted once in (it may even have been applied already: `settled` compares counts).
        Effect.andThen(Effect.sync(() => {
          shard.seqIn++
        }))
      )

    const offer = (a: DeviceActivity) => Effect.suspend(() => enqueue(shardOf(a.deviceId), { _tag: "activity", activity: a }))

    const settled = () =>
      Promise.all(
        shards.map((shard) =>
          shard.doneIn >= shard.seqIn && shard.doneFx >= shard.seqFx
            ? undefined
            : new Promise<void>((resolve) => shard.waiters.push({ in: shard.seqIn, fx: shard.seqFx, resolve }))
        )
      ).then(() => undefined)

    // ---------------------------------------------------------------------------------
    // Start: rehydrate, subscribe, run the shards and the notifiers

    // Handed over from now on; taken once the shards run, after the rehydration.
    yield* activity.subscribe({ publish, offer })

    // Timers survive restarts: every device that was online when its snapshot was written
    // is rehydrated now (a query per 5,000) and resumes its deadline for what is left of it.
    const watched = yield* sql.query<{ device_id: string }>("SELECT device_id FROM device_actors WHERE snapshot->>'value' = 'online'")
    const started = Date.now()
    const byShard = new Map<Shard, Array<string>>()
    for (const row of watched) {
      const shard = shardOf(row.device_id)
      const list = byShard.get(shard)
      if (list === undefined) byShard.set(shard, [row.device_id])
      else list.push(row.device_id)
    }
    yield* Effect.forEach(byShard, ([shard, ids]) =>
      load(shard, ids, started).pipe(Effect.map((fresh) => {
        for (const [id, entry] of fresh) shard.hosted.set(id, entry)
      })), { concurrency: 4, discard: true })

    for (const shard of shards) yield* FiberMap.run(workers, shard.index, runShard(shard))

    /** Write-behind of snapshots; then each shard passivates its idle actors without a pending timer. */
    const flush = Effect.gen(function*() {
      const now = Date.now()
      const ids = [...dirty]
      dirty.clear()
      const entries = ids.flatMap((id) => {
        const shard = shardOf(id)
        // A change of liveness is written by its shard, just before it is told (space counts).
        if (shard.moved.has(id) || shard.applying.has(id)) {
          dirty.add(id)
          return []
        }
        const entry = shard.hosted.get(id)
        return entry === undefined ? [] : [[id, entry] as const]
      })
      yield* writeSnapshots(entries, now)
      yield* recordSessionSigns(entries)
      for (const shard of shards) {
        if (shard.hosted.size > 0) {
          if (Queue.offerUnsafe(shard.mailbox, { _tag: "passivate", now })) shard.seqIn++
        }
      }
    })
    yield* Effect.forkScoped(Effect.repeat(flush.pipe(Effect.ignore), Schedule.spaced(SNAPSHOT_EVERY)))
    yield* Effect.addFinalizer(() =>
      Effect.promise(settled).pipe(
        Effect.timeout(Duration.seconds(10)),
        Effect.ignore,
        Effect.andThen(flush),
        Effect.ignore,
        Effect.andThen(Effect.sync(() => {
          for (const shard of shards) shard.hosted.forEach((h) => h.actor.stop())
        }))
      )
    )

    return Supervisor.of({
      active: () => shards.reduce((n, s) => n + s.hosted.size, 0),
      rulesChanged: (organisationId) =>
        Effect.gen(function*() {
          yield* loadRules([organisationId], true).pipe(Effect.orDie)
          const all = rules.get(organisationId) ?? []
          const at = Date.now()
          for (const shard of shards) {
            for (const [id, entry] of shard.hosted) {
              if (entry.place.organisationId !== organisationId) continue
              const limit = offlineAfterMs(all, entry.place)
              if (entry.actor.getSnapshot().context.offlineAfterMs !== limit) {
                catchUp(shard, id, entry)
                entry.actor.send({ type: "device.configured", offlineAfterMs: limit, at })
                dirty.add(id)
              }
            }
          }
        }),
      settled
    })
  })

export class Supervisor extends Context.Service<Supervisor, SupervisorService>()("voltaic/supervisor/Supervisor") {
  static readonly layer = Layer.effect(Supervisor, make())
  /** The same with other settings (tests: a failing machine, a small mailbox, a fast restart schedule). */
  static readonly layerWith = (options: SupervisorOptions) => Layer.effect(Supervisor, make(options))
}
