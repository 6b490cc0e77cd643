import { Context, Effect, Layer, Schedule } from "effect"
import { type Actor, createActor } from "xstate"
import { type DeviceEmitted, deviceMachine } from "../../actors/deviceMachine.ts"
import { evaluateThreshold } from "../../actors/rules.ts"
import { Bus } from "../bus/Bus.ts"
import { alertTopic } from "../bus/topics.ts"
import { Activity, type DeviceActivity } from "../ingest/Activity.ts"
import { alertQuery, applyAlertEvent, openOrRepeat } from "../store/alerts.ts"
import { getOne } from "../store/crud.ts"
import { Sql, type SqlClient } from "../store/Sql.ts"

/**
 * Hosts one `deviceMachine` actor per device that shows activity or has a pending offline
 * timer, and performs what the machines emit: alerts opened, repeated and resolved, and
 * their delivery on the bus. Snapshots are written behind (every second) and rehydrated at
 * start, so a device that fell silent while the process was down still goes offline on time.
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

interface Hosted {
  readonly actor: Actor<typeof deviceMachine>
  readonly organisationId: string
  readonly spaceId: string | null
  readonly productId: string | null
  lastActiveAt: number
}

export interface AlertOpened {
  readonly alertId: string
  readonly ruleId: string
  readonly deviceId: string
  readonly organisationId: string
}

export interface SupervisorService {
  /** Devices with a live actor now. */
  readonly active: () => number
  /** Rules of an organisation changed: re-read them and reconfigure its actors. */
  rulesChanged(organisationId: string): Effect.Effect<void>
  /** Waits until every activity handed over so far has been applied (tests, shutdown). */
  readonly settled: () => Promise<void>
  /** Called for each alert opened here (notifications hook). */
  onAlertOpened(listener: (opened: AlertOpened) => Effect.Effect<void>): void
}

/** Idle actors without a pending timer leave memory after this; their snapshot stays. */
const PASSIVATE_AFTER_MS = 5 * 60 * 1000
const SNAPSHOT_EVERY = "1 second"

const applies = (rule: Rule, device: { spaceId: string | null; productId: string | null }) =>
  (rule.spaceId === null || rule.spaceId === device.spaceId) && (rule.productId === null || rule.productId === device.productId)

export class Supervisor extends Context.Service<Supervisor, SupervisorService>()("voltaic/supervisor/Supervisor") {
  static readonly layer = Layer.effect(
    Supervisor,
    Effect.gen(function*() {
      const sql = yield* Sql
      const bus = yield* Bus
      const activity = yield* Activity
      const hosted = new Map<string, Hosted>()
      const activating = new Map<string, Promise<Hosted | undefined>>()
      const rules = new Map<string, Promise<Array<Rule>>>()
      const dirty = new Set<string>()
      const alertListeners: Array<(opened: AlertOpened) => Effect.Effect<void>> = []
      let work: Promise<void> = Promise.resolve()

      const run = <A>(effect: Effect.Effect<A, unknown>) =>
        Effect.runPromise(effect.pipe(Effect.tapCause((cause) => Effect.logError("supervisor", cause)), Effect.orDie))

      const rulesOf = (organisationId: string) => {
        let found = rules.get(organisationId)
        if (found === undefined) {
          found = run(sql.query<Record<string, unknown>>(
            "SELECT * FROM alert_rules WHERE organisation_id = $1 AND enabled",
            [organisationId]
          )).then((rows) =>
            rows.map((r) => ({
              id: String(r.id),
              organisationId,
              name: String(r.name),
              type: r.type as Rule["type"],
              autoResolve: r.auto_resolve === true,
              config: (r.config ?? {}) as Record<string, unknown>,
              productId: (r.product_id as string | null) ?? null,
              spaceId: (r.space_id as string | null) ?? null
            }))
          )
          rules.set(organisationId, found)
        }
        return found
      }

      const offlineAfterMs = (all: Array<Rule>, device: { spaceId: string | null; productId: string | null }) => {
        const seconds = all.filter((r) => r.type === "offline" && applies(r, device)).map((r) => Number(r.config.afterSeconds))
        return seconds.length === 0 ? null : Math.min(...seconds) * 1000
      }

      const publishAlert = (client: SqlClient, organisationId: string, deviceId: string, alertId: string) =>
        getOne(client, alertQuery, organisationId, alertId).pipe(
          Effect.flatMap((alert) => bus.deliver({ organisationId, deviceId, topic: alertTopic(deviceId), payload: JSON.stringify(alert) }))
        )

      const raise = (rule: Rule, deviceId: string, at: number, event: DeviceActivity["event"] | null, note: string) =>
        Effect.gen(function*() {
          const opened = yield* openOrRepeat(sql, {
            organisationId: rule.organisationId,
            ruleId: rule.id,
            deviceId,
            at,
            event: event ?? null,
            note
          })
          yield* publishAlert(sql, rule.organisationId, deviceId, opened.id)
          if (opened.created) {
            for (const listener of alertListeners) {
              yield* listener({ alertId: opened.id, ruleId: rule.id, deviceId, organisationId: rule.organisationId })
            }
          }
        })

      const clear = (rule: Rule, deviceId: string, at: number) =>
        Effect.gen(function*() {
          if (!rule.autoResolve) return
          const [open] = yield* sql.query<{ id: string }>(
            "SELECT id FROM alerts WHERE alert_rule_id = $1 AND device_id = $2 AND resolved_at IS NULL",
            [rule.id, deviceId]
          )
          if (open === undefined) return
          yield* applyAlertEvent(sql, rule.organisationId, open.id, { type: "alert.cleared", at, autoResolve: true })
          yield* publishAlert(sql, rule.organisationId, deviceId, open.id)
        })

      /** Serialised: the effects of one device's emissions happen in order. */
      const perform = (effect: Effect.Effect<void, unknown>) => {
        work = work.then(() => run(effect)).catch(() => undefined)
      }

      const onEmitted = (hostedDevice: { organisationId: string; spaceId: string | null; productId: string | null }) =>
        (emitted: DeviceEmitted) => {
          dirty.add(emitted.deviceId)
          perform(Effect.gen(function*() {
            const all = yield* Effect.promise(() => rulesOf(hostedDevice.organisationId))
            if (emitted.type === "device.anomaly") {
              const rule = all.find((r) => r.id === emitted.ruleId)
              if (rule === undefined) return
              if (emitted.verdict === "breach") {
                yield* raise(rule, emitted.deviceId, emitted.at, null, `value ${emitted.z.toFixed(1)} standard deviations from its baseline`)
              } else {
                yield* clear(rule, emitted.deviceId, emitted.at)
              }
              return
            }
            for (const rule of all.filter((r) => r.type === "offline" && applies(r, hostedDevice))) {
              if (emitted.type === "device.offline") {
                yield* raise(rule, emitted.deviceId, emitted.at, null, `no sign of life since ${new Date(emitted.lastSeenAt ?? 0).toISOString()}`)
              } else {
                yield* clear(rule, emitted.deviceId, emitted.at)
              }
            }
          }))
        }

      const activate = (deviceId: string, now: number): Promise<Hosted | undefined> => {
        const existing = hosted.get(deviceId)
        if (existing !== undefined) return Promise.resolve(existing)
        let pending = activating.get(deviceId)
        if (pending === undefined) {
          pending = run(Effect.gen(function*() {
            const [device] = yield* sql.query<{ organisation_id: string; space_id: string | null; product_id: string | null; snapshot: unknown }>(
              `SELECT d.organisation_id, d.space_id, d.product_id, a.snapshot
               FROM devices d LEFT JOIN device_actors a ON a.device_id = d.id WHERE d.id = $1`,
              [deviceId]
            )
            if (device === undefined) return undefined
            const place = { organisationId: device.organisation_id, spaceId: device.space_id, productId: device.product_id }
            const limit = offlineAfterMs(yield* Effect.promise(() => rulesOf(device.organisation_id)), place)
            const actor = device.snapshot
              ? createActor(deviceMachine, { input: { deviceId, offlineAfterMs: limit }, snapshot: device.snapshot as never })
              : createActor(deviceMachine, { input: { deviceId, offlineAfterMs: limit } })
            actor.on("*", onEmitted(place))
            actor.start()
            if (device.snapshot) {
              actor.send({ type: "device.resumed", at: now })
              if (actor.getSnapshot().context.offlineAfterMs !== limit) actor.send({ type: "device.configured", offlineAfterMs: limit, at: now })
            }
            const entry: Hosted = { actor, ...place, lastActiveAt: now }
            hosted.set(deviceId, entry)
            return entry
          })).finally(() => activating.delete(deviceId))
          activating.set(deviceId, pending)
        }
        return pending
      }

      const handle = (a: DeviceActivity) => {
        perform(Effect.gen(function*() {
          const entry = yield* Effect.promise(() => activate(a.deviceId, a.at))
          if (entry === undefined) return
          entry.lastActiveAt = a.at
          entry.actor.send({ type: "device.seen", at: a.at })
          dirty.add(a.deviceId)
          const event = a.event
          if (event === undefined) return
          const all = yield* Effect.promise(() => rulesOf(a.organisationId))
          const anomalyRules = all
            .filter((r) => r.type === "anomaly" && applies(r, entry) && r.config.eventName === event.name)
            .map((r) => ({
              id: r.id,
              eventName: String(r.config.eventName),
              path: r.config.path as string | undefined,
              window: Number(r.config.window),
              zScore: Number(r.config.zScore)
            }))
          if (anomalyRules.length > 0) {
            entry.actor.send({ type: "device.measured", at: a.at, eventName: event.name, data: event.data, rules: anomalyRules })
          }
          for (const rule of all.filter((r) => r.type === "threshold" && applies(r, entry))) {
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
            if (verdict === "breach") yield* raise(rule, a.deviceId, a.at, event, `${event.name} out of range`)
            if (verdict === "clear") yield* clear(rule, a.deviceId, a.at)
          }
        }))
      }

      yield* activity.subscribe(handle)

      /** Write-behind of snapshots; passivation of idle actors without a pending timer. */
      const flush = Effect.gen(function*() {
        const now = Date.now()
        const ids = [...dirty]
        dirty.clear()
        const rows = ids.flatMap((id) => {
          const entry = hosted.get(id)
          return entry === undefined ? [] : [[id, JSON.stringify(entry.actor.getPersistedSnapshot())] as const]
        })
        if (rows.length > 0) {
          yield* sql.query(
            `INSERT INTO device_actors (device_id, snapshot, updated_at)
             SELECT u.id, u.snapshot::jsonb, $3 FROM unnest($1::text[], $2::text[]) AS u(id, snapshot)
             WHERE EXISTS (SELECT 1 FROM devices d WHERE d.id = u.id)
             ON CONFLICT (device_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at`,
            [rows.map((r) => r[0]), rows.map((r) => r[1]), now]
          )
        }
        for (const [id, entry] of hosted) {
          if (entry.actor.getSnapshot().value !== "online" && now - entry.lastActiveAt > PASSIVATE_AFTER_MS && !dirty.has(id)) {
            entry.actor.stop()
            hosted.delete(id)
          }
        }
      })
      yield* Effect.forkScoped(Effect.repeat(flush.pipe(Effect.ignore), Schedule.spaced(SNAPSHOT_EVERY)))
      yield* Effect.addFinalizer(() =>
        Effect.promise(() => work).pipe(Effect.andThen(flush), Effect.ignore, Effect.andThen(Effect.sync(() => hosted.forEach((h) => h.actor.stop()))))
      )

      // Timers survive restarts: every device that was online when its snapshot was written
      // is rehydrated now and resumes its deadline for what is left of it.
      const watched = yield* sql.query<{ device_id: string }>("SELECT device_id FROM device_actors WHERE snapshot->>'value' = 'online'")
      const now = Date.now()
      yield* Effect.forEach(watched, (row) => Effect.promise(() => activate(row.device_id, now)), { concurrency: 16, discard: true })

      return Supervisor.of({
        active: () => hosted.size,
        rulesChanged: (organisationId) =>
          Effect.promise(async () => {
            rules.delete(organisationId)
            const all = await rulesOf(organisationId)
            const at = Date.now()
            for (const [, entry] of hosted) {
              if (entry.organisationId !== organisationId) continue
              const limit = offlineAfterMs(all, entry)
              if (entry.actor.getSnapshot().context.offlineAfterMs !== limit) {
                entry.actor.send({ type: "device.configured", offlineAfterMs: limit, at })
                dirty.add(entry.actor.getSnapshot().context.deviceId)
              }
            }
          }),
        settled: () => work,
        onAlertOpened: (listener) => {
          alertListeners.push(listener)
        }
      })
    })
  )
}
