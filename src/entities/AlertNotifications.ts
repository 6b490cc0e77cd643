import { Context, Effect, Layer, Queue } from "effect"
import { Notifier } from "../notify/Notifier.ts"
import type { AlertJson } from "../store/alerts.ts"
import { Sql } from "../store/Sql.ts"
import { Space } from "./protocol.ts"

/**
 * Sends each newly opened alert through its rule's notification template (webhook, or e-mail
 * to the alert recipients its device's Space entity holds) and records the outcomes on the
 * alert. The AlertBucket entity hands an opened alert over (`opened`) and goes on: a few notifier
 * fibers of this process (NOTIFY_CONCURRENCY) take them, so a slow receiver (retries take up
 * to a minute) never holds up an alert entity, and an alert storm does not start thousands of
 * requests at once.
 *
 * At most once: a notification handed over is lost if this process dies before sending it, and
 * an alert entity that applies a raise again after a crash does not notify again.
 */

export interface AlertOpened {
  readonly organisationId: string
  readonly alert: AlertJson
}

/** Notifications sent at once: a slow webhook holds up neither alerts nor more than this. */
const NOTIFY_CONCURRENCY = 16

export class AlertNotifications extends Context.Service<AlertNotifications, {
  /** Queues the notifications of a newly opened alert; never waits. */
  readonly opened: (opened: AlertOpened) => Effect.Effect<void>
}>()("voltaic/entities/AlertNotifications") {
  static readonly layer = Layer.effect(
    AlertNotifications,
    Effect.gen(function*() {
      const sql = yield* Sql
      const notifier = yield* Notifier
      const spaces = yield* Space.client
      const notices = yield* Queue.unbounded<AlertOpened>()

      /** The space's alert recipients, in the order it holds them, with their addresses now. */
      const recipientsOf = (spaceId: string | undefined) =>
        Effect.gen(function*() {
          if (spaceId === undefined) return []
          const { recipients } = yield* spaces(spaceId).GetSpace()
          if (recipients.length === 0) return []
          const rows = yield* sql.query<{ id: string; email_address: string; full_name: string }>(
            `SELECT ou.id, u.email_address, u.full_name FROM organisation_users ou JOIN users u ON u.id = ou.user_id
             WHERE ou.id = ANY($1::text[])`,
            [recipients]
          )
          const byId = new Map(rows.map((r) => [r.id, { emailAddress: r.email_address, fullName: r.full_name }]))
          return recipients.flatMap((id) => {
            const found = byId.get(id)
            return found === undefined ? [] : [found]
          })
        })

      const send = ({ alert }: AlertOpened) =>
        Effect.gen(function*() {
          const [rule] = yield* sql.query<{ id: string; name: string; severity: string; type: string; notification_template_id: string | null }>(
            "SELECT id, name, severity, type, notification_template_id FROM alert_rules WHERE id = $1",
            [alert.alertRule.id]
          )
          if (rule === undefined) return
          const [template] = rule.notification_template_id === null ? [] : yield* sql.query<{
            title: string
            body: string
            type: string
            webhook_url: string | null
            webhook_headers: Record<string, string> | null
            config: Record<string, unknown> | null
          }>("SELECT title, body, type, webhook_url, webhook_headers, config FROM notification_templates WHERE id = $1", [
            rule.notification_template_id
          ])
          const recipients = yield* recipientsOf(alert.device?.space?.id)
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
            recipients
          })
          if (outcomes.length > 0) {
            // History beside the alert's state: the entity never reads or writes this column.
            yield* sql.query("UPDATE alerts SET notifications = notifications || $2::text::jsonb, updated_at = $3 WHERE id = $1", [
              alert.id,
              JSON.stringify(outcomes),
              Date.now()
            ])
          }
        }).pipe(Effect.catchCause((cause) => Effect.logError("alert notification failed", cause)))

      for (let i = 0; i < NOTIFY_CONCURRENCY; i++) {
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(notices), send)))
      }
      return AlertNotifications.of({ opened: (opened) => Effect.asVoid(Queue.offer(notices, opened)) })
    })
  )
}
