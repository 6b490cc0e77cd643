import { Effect } from "effect"
import { Notifier } from "../notify/Notifier.ts"
import { alertQuery } from "../store/alerts.ts"
import { getOne } from "../store/crud.ts"
import { Sql } from "../store/Sql.ts"

/** An alert just opened. */
export interface AlertOpened {
  readonly alertId: string
  readonly ruleId: string
  readonly deviceId: string
  readonly organisationId: string
}

/**
 * Sends a newly opened alert through its rule's notification template (webhook or e-mail to
 * the space's alert recipients) and records the outcomes on the alert. (Not called on this
 * branch: the alert entity of issue 16 calls it, and replaces this module.)
 */
export const notifyOpened = (opened: AlertOpened) =>
  Effect.gen(function*() {
    const sql = yield* Sql
    const notifier = yield* Notifier
    const alert = yield* getOne(sql, alertQuery, opened.organisationId, opened.alertId)
    const [rule] = yield* sql.query<{ id: string; name: string; severity: string; type: string; notification_template_id: string | null }>(
      "SELECT id, name, severity, type, notification_template_id FROM alert_rules WHERE id = $1",
      [opened.ruleId]
    )
    if (rule === undefined) return
    const [template] = rule.notification_template_id === null ? [] : yield* sql.query<{
      title: string
      body: string
      type: string
      webhook_url: string | null
      webhook_headers: Record<string, string> | null
      config: Record<string, unknown> | null
    }>("SELECT title, body, type, webhook_url, webhook_headers, config FROM notification_templates WHERE id = $1", [rule.notification_template_id])
    const recipients = yield* sql.query<{ email_address: string; full_name: string }>(
      `SELECT u.email_address, u.full_name FROM devices d
       JOIN space_alert_users a ON a.space_id = d.space_id
       JOIN organisation_users ou ON ou.id = a.organisation_user_id JOIN users u ON u.id = ou.user_id
       WHERE d.id = $1`,
      [opened.deviceId]
    )
    const outcomes = yield* notifier.notify({
      alert: { ...alert },
      rule: { id: rule.id, name: rule.name, severity: rule.severity, type: rule.type },
      device: alert.device === null ? null : { ...alert.device },
      event: alert.event === null ? null : { name: alert.event.name, data: alert.event.data },
      template: template === undefined ? null : {
        title: template.title,
        body: template.body,
        type: template.type,
        webhookUrl: template.webhook_url ?? undefined,
        webhookHeaders: template.webhook_headers ?? undefined,
        config: template.config ?? undefined
      },
      recipients: recipients.map((r) => ({ emailAddress: r.email_address, fullName: r.full_name }))
    })
    if (outcomes.length > 0) {
      yield* sql.query("UPDATE alerts SET notifications = notifications || $2::text::jsonb, updated_at = $3 WHERE id = $1", [
        opened.alertId,
        JSON.stringify(outcomes),
        Date.now()
      ])
    }
  }).pipe(Effect.catchCause((cause) => Effect.logError("alert notification failed", cause)))
