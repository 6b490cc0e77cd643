import { Effect } from "effect"
import { createActor } from "xstate"
import { type AlertContext, type AlertEvent, alertMachine } from "../../actors/alertMachine.ts"
import { newId } from "../domain/ids.ts"
import { type AlertJson, alertJsonOf, toAlert } from "../store/alerts.ts"
import { num, optNum, optStr, str } from "../store/rows.ts"
import type { Row, SqlClient } from "../store/Sql.ts"

/**
 * The alerts of one (rule, device) as the Alert entity holds them: the open one's machine state
 * (`alertMachine`, rehydrated from its row), and the SQL that reads and writes the rows. The
 * `alerts` row is the machine's snapshot (state and context columns) and, one row per
 * occurrence, the slot's history.
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

/** What the slot holds: its open alert, if any, and its newest alert (the same one when open). */
export interface Slot {
  readonly open: Latest | null
  readonly latest: Latest | null
}

export const isOpen = (alert: AlertState) => alert.context.resolvedAt === null

/** `ruleId/deviceId` (`alertEntityId`) back into its parts (rule ids hold no slash). */
export const slotOf = (entityId: string) => {
  const cut = entityId.indexOf("/")
  return cut < 0 ? { ruleId: entityId, deviceId: "" } : { ruleId: entityId.slice(0, cut), deviceId: entityId.slice(cut + 1) }
}

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

const SLOT = "alert_rule_id = $1 AND device_id IS NOT DISTINCT FROM NULLIF($2, '')"

/** The slot as stored: its open alert first, else its newest. */
export const loadSlot = (sql: SqlClient, ruleId: string, deviceId: string) =>
  Effect.map(
    sql.query(`SELECT * FROM alerts WHERE ${SLOT} ORDER BY (resolved_at IS NULL) DESC, last_seen_at DESC, created_at DESC LIMIT 1`, [
      ruleId,
      deviceId
    ]),
    ([row]): Slot => {
      if (row === undefined) return { open: null, latest: null }
      const latest = toLatest(row)
      return { open: isOpen(latest) ? latest : null, latest }
    }
  )

export interface Opening {
  readonly organisationId: string
  readonly ruleId: string
  readonly deviceId: string
  readonly at: number
  readonly note: string
  readonly event: { readonly id: string; readonly name: string; readonly data: unknown; readonly timestamp: number } | null
}

/** Opens an alert; undefined when the slot has an open one already (the partial unique index `alerts_one_open`). */
export const insertAlert = (sql: SqlClient, o: Opening) =>
  Effect.map(
    sql.query(
      `WITH a AS (
         INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, event_id, event_name, event_data, event_timestamp, note,
                             state, first_seen_at, last_seen_at, created_at, updated_at)
         VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7::text::jsonb, $8, $9, 'unresolved', $10, $10, $11, $11)
         ON CONFLICT (alert_rule_id, device_id) WHERE resolved_at IS NULL DO NOTHING
         RETURNING *)
       ${alertJsonOf}`,
      [
        newId("alt"),
        o.organisationId,
        o.ruleId,
        o.deviceId,
        o.event?.id ?? null,
        o.event?.name ?? null,
        o.event === null ? null : JSON.stringify(o.event.data ?? null),
        o.event?.timestamp ?? null,
        o.note,
        o.at,
        Date.now()
      ]
    ),
    (rows) => (rows[0] === undefined ? undefined : toAlert(rows[0]))
  )

/** Writes the machine's next state of an open alert; undefined when it is no longer open (or gone). */
export const writeAlert = (sql: SqlClient, id: string, next: AlertState) =>
  Effect.map(
    sql.query(
      `WITH a AS (
         UPDATE alerts SET state = $2, last_seen_at = $3, acknowledged_at = $4, resolved_at = $5, updated_at = $6
         WHERE id = $1 AND resolved_at IS NULL
         RETURNING *)
       ${alertJsonOf}`,
      [id, next.state, next.context.lastSeenAt, next.context.acknowledgedAt, next.context.resolvedAt, Date.now()]
    ),
    (rows) => (rows[0] === undefined ? undefined : toAlert(rows[0]))
  )

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

/** Whether the rule resolves its alerts when the condition clears (false when it is gone). */
export const autoResolves = (sql: SqlClient, ruleId: string) =>
  Effect.map(sql.query<{ auto_resolve: boolean }>("SELECT auto_resolve FROM alert_rules WHERE id = $1", [ruleId]), ([row]) => row?.auto_resolve === true)

/** The space of a device now (null: none, or the device is gone). */
export const spaceOfDevice = (sql: SqlClient, deviceId: string) =>
  Effect.map(sql.query<{ space_id: string | null }>("SELECT space_id FROM devices WHERE id = $1", [deviceId]), ([row]) => row?.space_id ?? null)
