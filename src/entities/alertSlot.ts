import { Clock, Effect } from "effect"
import { createActor } from "xstate"
import { type AlertContext, type AlertEvent, alertMachine } from "../../actors/alertMachine.ts"
import { newId } from "../domain/ids.ts"
import { type AlertJson, alertJsonOf, toAlert } from "../store/alerts.ts"
import { num, optNum, optStr, str } from "../store/rows.ts"
import type { Row, SqlClient, SqlError } from "../store/Sql.ts"
import { coalesce, perClient } from "./coalesce.ts"
import { countAlertsRaised } from "../metrics.ts"

/**
 * The alerts of each (rule, device) slot as the AlertBucket entity holds them: the open one's
 * machine state (`alertMachine`, rehydrated from its row), and the SQL that reads and writes the
 * rows, a statement per batch of slots. The `alerts` row is the machine's snapshot (state and
 * context columns) and, one row per occurrence, the slot's history.
 */

export interface AlertState {
  readonly state: string
  readonly context: AlertContext
}

/** The slot's newest alert, open or not. */
export interface Latest extends AlertState {
  readonly id: string
  readonly organisationId: string
}

/** What the slot holds: its open alert, if any, its newest alert (the same one when open), its device's space. */
export interface Slot {
  readonly open: Latest | null
  readonly latest: Latest | null
  readonly spaceId: string | null
}

export const slotKey = (ruleId: string, deviceId: string) => `${ruleId}/${deviceId}`

export const isOpen = (alert: AlertState) => alert.context.resolvedAt === null

/** One lifecycle event through `alertMachine` from the state held: the machine decides. */
export const step = (alert: AlertState, event: AlertEvent): AlertState => {
  const snapshot = alertMachine.resolveState({ value: alert.state, context: alert.context })
  const actor = createActor(alertMachine, { snapshot, input: { at: event.at } }).start()
  actor.send(event)
  const next = actor.getSnapshot()
  actor.stop()
  return { state: String(next.value), context: next.context }
}

export const sameState = (a: AlertState, b: AlertState) =>
  a.state === b.state && a.context.lastSeenAt === b.context.lastSeenAt && a.context.acknowledgedAt === b.context.acknowledgedAt &&
  a.context.resolvedAt === b.context.resolvedAt

const toLatest = (row: Row): Latest => ({
  id: str(row, "id"),
  organisationId: str(row, "organisation_id"),
  state: str(row, "state"),
  context: {
    firstSeenAt: num(row, "first_seen_at"),
    lastSeenAt: num(row, "last_seen_at"),
    acknowledgedAt: optNum(row, "acknowledged_at"),
    resolvedAt: optNum(row, "resolved_at")
  }
})

export const fromJson = (alert: AlertJson, organisationId: string): Latest => ({
  id: alert.id,
  organisationId,
  state: alert.state,
  context: { firstSeenAt: alert.firstSeenAt, lastSeenAt: alert.lastSeenAt, acknowledgedAt: alert.acknowledgedAt, resolvedAt: alert.resolvedAt }
})

const slotRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (slots: ReadonlyArray<{ readonly ruleId: string; readonly deviceId: string }>) =>
      sql.query(
        `SELECT s.rule_id, s.device_id, d.space_id, al.* FROM unnest($1::text[], $2::text[]) AS s(rule_id, device_id)
         LEFT JOIN devices d ON d.id = s.device_id
         LEFT JOIN LATERAL (SELECT * FROM alerts x WHERE x.alert_rule_id = s.rule_id AND x.device_id = s.device_id
           ORDER BY (x.resolved_at IS NULL) DESC, x.last_seen_at DESC, x.created_at DESC LIMIT 1) al ON true`,
        [slots.map((s) => s.ruleId), slots.map((s) => s.deviceId)]
      ),
    itemKey: (slot) => slotKey(slot.ruleId, slot.deviceId),
    outputKey: (row) => slotKey(str(row, "rule_id"), str(row, "device_id"))
  })
)

/**
 * The slots as stored (`slotKey`): each one's open alert first, else its newest; a slot without
 * alerts is empty. Coalesced across alert buckets, like the writes below (`coalesce.ts`).
 */
export const loadSlots = (sql: SqlClient, slots: ReadonlyArray<{ readonly ruleId: string; readonly deviceId: string }>) =>
  Effect.map(slotRows(sql)(slots), (rows) => {
    const out = new Map<string, Slot>()
    for (const row of rows) {
      const latest = row.id === null || row.id === undefined ? null : toLatest(row)
      out.set(slotKey(str(row, "rule_id"), str(row, "device_id")), {
        open: latest !== null && isOpen(latest) ? latest : null,
        latest,
        spaceId: optStr(row, "space_id")
      })
    }
    return out
  })

export interface Opening {
  readonly id: string
  readonly organisationId: string
  readonly ruleId: string
  readonly deviceId: string
  readonly note: string
  readonly event: { readonly id: string; readonly name: string; readonly data: unknown; readonly timestamp: number } | null
  readonly next: AlertState
}

export const newAlertId = () => newId("alt")

/**
 * Opens alerts, one statement, each with the gateway its device is behind then: those whose slot
 * has an open alert already, or one seen as late as the new one (the raise was applied before),
 * are not inserted, and are missing from the answer;
 * so an opening planned on a slot that was never read (`AlertBucket`: a raise of a slot it does
 * not hold) is inserted only where the slot's rows allow it. The partial unique index
 * `alerts_one_open` turns away one opened concurrently.
 */
const insertRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (openings: ReadonlyArray<Opening>) => Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.map(
    sql.query(
      `WITH a AS (
         INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, gateway_id, event_id, event_name, event_data, event_timestamp, note,
                             state, first_seen_at, last_seen_at, acknowledged_at, resolved_at, created_at, updated_at)
         SELECT u.id, u.org, u.rule, u.device, (SELECT d.gateway_id FROM devices d WHERE d.id = u.device),
                u.event_id, u.event_name, u.event_data::jsonb, u.event_ts, u.note,
                u.state, u.first_seen, u.last_seen, u.ack, u.resolved, $15, $15
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int8[], $9::text[],
                     $10::text[], $11::int8[], $12::int8[], $13::int8[], $14::int8[])
           AS u(id, org, rule, device, event_id, event_name, event_data, event_ts, note, state, first_seen, last_seen, ack, resolved)
         WHERE NOT EXISTS (SELECT 1 FROM alerts x WHERE x.alert_rule_id = u.rule AND x.device_id = u.device
                             AND (x.resolved_at IS NULL OR x.last_seen_at >= u.first_seen))
         ON CONFLICT (alert_rule_id, device_id) WHERE resolved_at IS NULL DO NOTHING
         RETURNING *)
       ${alertJsonOf}`,
      [
        openings.map((o) => o.id),
        openings.map((o) => o.organisationId),
        openings.map((o) => o.ruleId),
        openings.map((o) => o.deviceId),
        openings.map((o) => o.event?.id ?? null),
        openings.map((o) => o.event?.name ?? null),
        openings.map((o) => (o.event === null ? null : JSON.stringify(o.event.data ?? null))),
        openings.map((o) => o.event?.timestamp ?? null),
        openings.map((o) => o.note),
        openings.map((o) => o.next.state),
        openings.map((o) => o.next.context.firstSeenAt),
        openings.map((o) => o.next.context.lastSeenAt),
        openings.map((o) => o.next.context.acknowledgedAt),
        openings.map((o) => o.next.context.resolvedAt),
        now
      ]
    ),
    (rows) => {
      countAlertsRaised(rows.length)
      return rows.map(toAlert)
    }
  )),
    itemKey: (o) => o.id,
    outputKey: (a) => a.id
  })
)

/** As above, coalesced with other buckets' openings; `created_at` is when the statement runs. */
export const insertAlerts = (sql: SqlClient, openings: ReadonlyArray<Opening>): Effect.Effect<ReadonlyArray<AlertJson>, SqlError> =>
  insertRows(sql)(openings)

/** Writes the machines' next states of open alerts, one statement; one no longer open (or gone) is missing from the answer. */
const updateRows = perClient((sql: SqlClient) =>
  coalesce({
    run: (writes: ReadonlyArray<{ readonly id: string; readonly next: AlertState }>) => Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.map(
    sql.query(
      `WITH a AS (
         UPDATE alerts x SET state = u.state, last_seen_at = u.last_seen, acknowledged_at = u.ack, resolved_at = u.resolved, updated_at = $6
         FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int8[]) AS u(id, state, last_seen, ack, resolved)
         WHERE x.id = u.id AND x.resolved_at IS NULL
         RETURNING x.*)
       ${alertJsonOf}`,
      [
        writes.map((w) => w.id),
        writes.map((w) => w.next.state),
        writes.map((w) => w.next.context.lastSeenAt),
        writes.map((w) => w.next.context.acknowledgedAt),
        writes.map((w) => w.next.context.resolvedAt),
        now
      ]
    ),
    (rows) => rows.map(toAlert)
  )),
    itemKey: (w) => w.id,
    outputKey: (a) => a.id
  })
)

export const writeAlerts = (
  sql: SqlClient,
  writes: ReadonlyArray<{ readonly id: string; readonly next: AlertState }>
): Effect.Effect<ReadonlyArray<AlertJson>, SqlError> => updateRows(sql)(writes)

/** An alert of this slot by id, with its device's space now; undefined when the id is not the slot's. */
export const findInSlot = (sql: SqlClient, alertId: string, ruleId: string, deviceId: string) =>
  Effect.map(
    sql.query(
      `SELECT al.resolved_at, d.space_id FROM alerts al LEFT JOIN devices d ON d.id = al.device_id
       WHERE al.id = $3 AND al.alert_rule_id = $1 AND al.device_id IS NOT DISTINCT FROM NULLIF($2, '')`,
      [ruleId, deviceId, alertId]
    ),
    ([row]) => (row === undefined ? undefined : { resolved: optNum(row, "resolved_at") !== null, spaceId: optStr(row, "space_id") })
  )
