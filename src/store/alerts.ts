import { Effect } from "effect"
import { createActor } from "xstate"
import { type AlertEvent, alertMachine } from "../../actors/alertMachine.ts"
import { NotFound } from "../domain/errors.ts"
import { newId } from "../domain/ids.ts"
import type { ResourceQuery, Table } from "./crud.ts"
import { bool, num, obj, optNum, optStr, str } from "./rows.ts"
import type { Row, SqlClient } from "./Sql.ts"

export const templatesTable: Table = {
  name: "notification_templates",
  resource: "notification template",
  prefix: "tpl",
  columns: {
    title: { column: "title" },
    type: { column: "type" },
    body: { column: "body" },
    webhookUrl: { column: "webhook_url" },
    webhookHeaders: { column: "webhook_headers", json: true },
    config: { column: "config", json: true }
  },
  references: {}
}

export interface TemplateJson {
  id: string
  title: string
  type: string
  body: string
  webhookUrl: string | null
  webhookHeaders: Record<string, unknown> | null
  config: Record<string, unknown> | null
  createdAt: number
  updatedAt: number
}

export const toTemplate = (row: Row): TemplateJson => ({
  id: str(row, "id"),
  title: str(row, "title"),
  type: str(row, "type"),
  body: str(row, "body"),
  webhookUrl: optStr(row, "webhook_url"),
  webhookHeaders: obj(row, "webhook_headers"),
  config: obj(row, "config"),
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

export const templateQuery: ResourceQuery<TemplateJson> = {
  resource: "notification template",
  select: "t.*",
  from: "notification_templates t",
  base: "notification_templates t",
  alias: "t",
  map: toTemplate,
  order: { createdAt: "t.created_at", updatedAt: "t.updated_at", id: "t.id", title: "t.title" }
}

export const rulesTable: Table = {
  name: "alert_rules",
  resource: "alert rule",
  prefix: "rul",
  columns: {
    name: { column: "name" },
    type: { column: "type" },
    severity: { column: "severity" },
    enabled: { column: "enabled" },
    autoResolve: { column: "auto_resolve" },
    config: { column: "config", json: true }
  },
  references: {
    product: { column: "product_id", table: "products", resource: "product" },
    space: { column: "space_id", table: "spaces", resource: "space" },
    notificationTemplate: { column: "notification_template_id", table: "notification_templates", resource: "notification template" }
  }
}

export interface RuleJson {
  id: string
  name: string
  type: string
  severity: string
  enabled: boolean
  autoResolve: boolean
  config: Record<string, unknown>
  organisation: { id: string; name: string }
  product: { id: string } | null
  space: { id: string } | null
  notificationTemplate: { id: string } | null
  createdAt: number
  updatedAt: number
}

const ref = (row: Row, column: string) => {
  const id = optStr(row, column)
  return id === null ? null : { id }
}

export const toRule = (row: Row): RuleJson => ({
  id: str(row, "id"),
  name: str(row, "name"),
  type: str(row, "type"),
  severity: str(row, "severity"),
  enabled: bool(row, "enabled"),
  autoResolve: bool(row, "auto_resolve"),
  config: obj(row, "config") ?? {},
  organisation: { id: str(row, "organisation_id"), name: str(row, "organisation_name") },
  product: ref(row, "product_id"),
  space: ref(row, "space_id"),
  notificationTemplate: ref(row, "notification_template_id"),
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

export const ruleQuery: ResourceQuery<RuleJson> = {
  resource: "alert rule",
  select: "r.*, o.name AS organisation_name",
  from: "alert_rules r JOIN organisations o ON o.id = r.organisation_id",
  base: "alert_rules r",
  alias: "r",
  map: toRule,
  order: { createdAt: "r.created_at", updatedAt: "r.updated_at", id: "r.id", name: "r.name", severity: "r.severity" }
}

export interface AlertJson {
  id: string
  state: string
  note: string
  event: { id: string | null; name: string; data: unknown; timestamp: number | null } | null
  device: { id: string; name: string; customId: string | null; space: { id: string } | null; product: { id: string } | null } | null
  gateway: { id: string } | null
  alertRule: { id: string; name: string; type: string; severity: string; autoResolve: boolean }
  firstSeenAt: number
  lastSeenAt: number
  acknowledgedAt: number | null
  resolvedAt: number | null
  notifications: Array<unknown>
  createdAt: number
  updatedAt: number
}

export const toAlert = (row: Row): AlertJson => {
  const deviceId = optStr(row, "device_id")
  const eventName = optStr(row, "event_name")
  return {
    id: str(row, "id"),
    state: str(row, "state"),
    note: str(row, "note"),
    event: eventName === null
      ? null
      : { id: optStr(row, "event_id"), name: eventName, data: row.event_data ?? null, timestamp: optNum(row, "event_timestamp") },
    device: deviceId === null
      ? null
      : {
        id: deviceId,
        name: str(row, "device_name"),
        customId: optStr(row, "device_custom_id"),
        space: ref(row, "device_space_id"),
        product: ref(row, "device_product_id")
      },
    gateway: ref(row, "gateway_id"),
    alertRule: {
      id: str(row, "alert_rule_id"),
      name: str(row, "rule_name"),
      type: str(row, "rule_type"),
      severity: str(row, "rule_severity"),
      autoResolve: bool(row, "rule_auto_resolve")
    },
    firstSeenAt: num(row, "first_seen_at"),
    lastSeenAt: num(row, "last_seen_at"),
    acknowledgedAt: optNum(row, "acknowledged_at"),
    resolvedAt: optNum(row, "resolved_at"),
    notifications: Array.isArray(row.notifications) ? row.notifications : [],
    createdAt: num(row, "created_at"),
    updatedAt: num(row, "updated_at")
  }
}

export const alertQuery: ResourceQuery<AlertJson> = {
  resource: "alert",
  select: `a.*, r.name AS rule_name, r.type AS rule_type, r.severity AS rule_severity, r.auto_resolve AS rule_auto_resolve,
           d.name AS device_name, d.custom_id AS device_custom_id, d.space_id AS device_space_id, d.product_id AS device_product_id`,
  from: `alerts a JOIN alert_rules r ON r.id = a.alert_rule_id LEFT JOIN devices d ON d.id = a.device_id`,
  base: "alerts a",
  alias: "a",
  map: toAlert,
  order: { createdAt: "a.created_at", updatedAt: "a.updated_at", id: "a.id", lastSeenAt: "a.last_seen_at", firstSeenAt: "a.first_seen_at" }
}

/** Runs one lifecycle event through `alertMachine` from the stored state: the machine decides. */
export const nextAlertState = (row: Row, event: AlertEvent) => {
  const snapshot = alertMachine.resolveState({
    value: str(row, "state"),
    context: {
      firstSeenAt: num(row, "first_seen_at"),
      lastSeenAt: num(row, "last_seen_at"),
      acknowledgedAt: optNum(row, "acknowledged_at"),
      resolvedAt: optNum(row, "resolved_at")
    }
  })
  const actor = createActor(alertMachine, { snapshot, input: { at: event.at } }).start()
  actor.send(event)
  const next = actor.getSnapshot()
  actor.stop()
  return { state: String(next.value), context: next.context }
}

/**
 * Runs one lifecycle event through `alertMachine` for an alert and stores the outcome. Answers
 * whether this event resolved it (it was open until this write) and its device's space, for the
 * space's open-alert count. The write applies only to the state it was decided from: when
 * another writer changed the alert meanwhile, the event is decided again on what it wrote.
 */
export const applyAlertEvent = (sql: SqlClient, organisationId: string, id: string, event: AlertEvent) =>
  Effect.gen(function*() {
    for (;;) {
      const [row] = yield* sql.query(
        "SELECT al.*, d.space_id AS device_space_id FROM alerts al LEFT JOIN devices d ON d.id = al.device_id WHERE al.id = $1 AND al.organisation_id = $2",
        [id, organisationId]
      )
      if (row === undefined) return yield* new NotFound({ resource: "alert", id })
      const next = nextAlertState(row, event)
      const was = optNum(row, "resolved_at")
      const written = yield* sql.query(
        `UPDATE alerts SET state = $2, last_seen_at = $3, acknowledged_at = $4, resolved_at = $5, updated_at = $6
         WHERE id = $1 AND state = $7 AND resolved_at IS NOT DISTINCT FROM $8::int8 AND acknowledged_at IS NOT DISTINCT FROM $9::int8
         RETURNING id`,
        [id, next.state, next.context.lastSeenAt, next.context.acknowledgedAt, next.context.resolvedAt, Date.now(), str(row, "state"), was,
          optNum(row, "acknowledged_at")]
      )
      if (written.length > 0) return { resolved: was === null && next.context.resolvedAt !== null, spaceId: optStr(row, "device_space_id") }
    }
  })

/** An occurrence of a rule's condition on a device: opens its alert, or repeats the open one. */
export interface AlertRaise {
  readonly organisationId: string
  readonly ruleId: string
  readonly deviceId: string
  readonly at: number
  readonly event: { readonly id: string | null; readonly name: string; readonly data: unknown; readonly timestamp: number } | null
  readonly note: string
}

/** Alert rows as `a`, with their rule and device joined: `toAlert` reads them. */
const alertJson = `SELECT ${alertQuery.select} FROM a JOIN alert_rules r ON r.id = a.alert_rule_id LEFT JOIN devices d ON d.id = a.device_id`

/**
 * Opens an alert for each raise whose rule and device have none open, with one statement,
 * and answers the opened alerts as published (`AlertJson`). A raise that found an open alert
 * (the partial unique index `alerts_one_open`) is answered in `repeats`.
 * At most one raise per (rule, device).
 */
export const openMany = (sql: SqlClient, raises: ReadonlyArray<AlertRaise>) =>
  Effect.gen(function*() {
    if (raises.length === 0) return { opened: [] as Array<AlertJson>, repeats: [] as Array<AlertRaise> }
    const now = Date.now()
    const rows = yield* sql.query(
      `WITH a AS (
         INSERT INTO alerts (id, organisation_id, alert_rule_id, device_id, event_id, event_name, event_data, event_timestamp, note,
                             state, first_seen_at, last_seen_at, created_at, updated_at)
         SELECT u.id, u.org, u.rule, u.device, u.event_id, u.event_name, u.event_data::jsonb, u.event_ts, u.note,
                'unresolved', u.at, u.at, $11, $11
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int8[], $9::text[], $10::int8[])
           AS u(id, org, rule, device, event_id, event_name, event_data, event_ts, note, at)
         ON CONFLICT (alert_rule_id, device_id) WHERE resolved_at IS NULL DO NOTHING
         RETURNING *)
       ${alertJson}`,
      [
        raises.map(() => newId("alt", now)),
        raises.map((r) => r.organisationId),
        raises.map((r) => r.ruleId),
        raises.map((r) => r.deviceId),
        raises.map((r) => r.event?.id ?? null),
        raises.map((r) => r.event?.name ?? null),
        raises.map((r) => (r.event === null ? null : JSON.stringify(r.event.data ?? null))),
        raises.map((r) => r.event?.timestamp ?? null),
        raises.map((r) => r.note),
        raises.map((r) => r.at),
        now
      ]
    )
    const opened = rows.map(toAlert)
    const created = new Set(opened.map((a) => `${a.alertRule.id} ${a.device?.id ?? ""}`))
    return { opened, repeats: raises.filter((r) => !created.has(`${r.ruleId} ${r.deviceId}`)) }
  })

/**
 * Runs one lifecycle event through `alertMachine` for the open alert of each (rule, device),
 * with one read and one write for the lot: repeats (`alert.repeated`) and clears
 * (`alert.cleared`). Answers the alerts the machine changed, as published; an alert resolved
 * by someone else between the read and the write is left as they wrote it (a resolved alert
 * does not change again), so a resolution is answered once.
 * At most one item per (rule, device).
 */
export const transitionOpen = (
  sql: SqlClient,
  items: ReadonlyArray<{ readonly ruleId: string; readonly deviceId: string; readonly event: AlertEvent }>
) =>
  Effect.gen(function*() {
    if (items.length === 0) return [] as Array<AlertJson>
    const open = yield* sql.query(
      `SELECT al.* FROM alerts al JOIN unnest($1::text[], $2::text[]) AS u(rule, device)
         ON al.alert_rule_id = u.rule AND al.device_id = u.device
       WHERE al.resolved_at IS NULL`,
      [items.map((i) => i.ruleId), items.map((i) => i.deviceId)]
    )
    const byKey = new Map(items.map((i) => [`${i.ruleId} ${i.deviceId}`, i.event]))
    const changed = open.flatMap((row) => {
      const event = byKey.get(`${str(row, "alert_rule_id")} ${optStr(row, "device_id") ?? ""}`)
      if (event === undefined) return []
      const next = nextAlertState(row, event)
      const same = next.state === str(row, "state") && next.context.lastSeenAt === num(row, "last_seen_at") &&
        next.context.acknowledgedAt === optNum(row, "acknowledged_at") && next.context.resolvedAt === optNum(row, "resolved_at")
      return same ? [] : [{ id: str(row, "id"), next }]
    })
    if (changed.length === 0) return []
    const rows = yield* sql.query(
      `WITH a AS (
         UPDATE alerts SET state = u.state, last_seen_at = u.last_seen_at, acknowledged_at = u.acknowledged_at,
                           resolved_at = u.resolved_at, updated_at = $6
         FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int8[]) AS u(id, state, last_seen_at, acknowledged_at, resolved_at)
         WHERE alerts.id = u.id AND alerts.resolved_at IS NULL
         RETURNING alerts.*)
       ${alertJson}`,
      [
        changed.map((c) => c.id),
        changed.map((c) => c.next.state),
        changed.map((c) => c.next.context.lastSeenAt),
        changed.map((c) => c.next.context.acknowledgedAt),
        changed.map((c) => c.next.context.resolvedAt),
        Date.now()
      ]
    )
    return rows.map(toAlert)
  })
