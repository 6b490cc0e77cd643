import { Cause, Context, Effect, Layer, Queue } from "effect"
import { Notifier, reachesAnyone } from "../notify/Notifier.ts"
import type { AlertJson } from "../store/alerts.ts"
import { Bus } from "../bus/Bus.ts"
import { Sql } from "../store/Sql.ts"
import { Space } from "./protocol.ts"

/**
 * Sends each newly opened alert through its rule's notification template (webhook, or e-mail
 * to the alert recipients its device's Space entity holds) and records the outcomes on the
 * alert. The AlertBucket entity hands an opened alert over (`opened`) and goes on: a few notifier
 * fibers of this process (NOTIFY_CONCURRENCY) take them, so a slow receiver (retries take up
 * to a minute) never holds up an alert entity, and an alert storm does not start thousands of
 * requests at once. What they need (rules, templates, recipients) is read for batches of
 * opened alerts, ahead of the senders.
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
/** Opened alerts whose rules, templates and recipients are read together. */
const BATCH = 512

interface RuleRow {
  readonly id: string
  readonly name: string
  readonly severity: string
  readonly type: string
  readonly notification_template_id: string | null
}

interface TemplateRow {
  readonly id: string
  readonly title: string
  readonly body: string
  readonly type: string
  readonly webhook_url: string | null
  readonly webhook_headers: Record<string, string> | null
  readonly config: Record<string, unknown> | null
}

export class AlertNotifications extends Context.Service<AlertNotifications, {
  /** Queues the notifications of newly opened alerts; never waits. */
  readonly opened: (opened: ReadonlyArray<AlertOpened>) => Effect.Effect<void>
}>()("voltaic/entities/AlertNotifications") {
  static readonly layer = Layer.effect(
    AlertNotifications,
    Effect.gen(function*() {
      const sql = yield* Sql
      const notifier = yield* Notifier
      const bus = yield* Bus
      const spaces = yield* Space.client
      const notices = yield* Queue.unbounded<AlertOpened>()

      /** The alert recipients of each space, in the order it holds them, with their addresses now. */
      const recipientsOf = Effect.fnUntraced(function*(spaceIds: ReadonlyArray<string>) {
        const held = yield* Effect.forEach(spaceIds, (spaceId) =>
          Effect.map(spaces(spaceId).GetSpace(), ({ recipients }) => [spaceId, recipients] as const), { concurrency: 8 })
        const ids = [...new Set(held.flatMap(([, recipients]) => recipients))]
        const rows = ids.length === 0 ? [] : yield* sql.query<{ id: string; email_address: string; full_name: string }>(
          `SELECT ou.id, u.email_address, u.full_name FROM organisation_users ou JOIN users u ON u.id = ou.user_id
           WHERE ou.id = ANY($1::text[])`,
          [ids]
        )
        const byId = new Map(rows.map((r) => [r.id, { emailAddress: r.email_address, fullName: r.full_name }]))
        return new Map(held.map(([spaceId, recipients]) => [spaceId, recipients.flatMap((id) => {
          const found = byId.get(id)
          return found === undefined ? [] : [found]
        })]))
      })

      /**
       * What the notifications of a batch of opened alerts need, read for the whole batch: an
       * alert storm costs a few statements and one `GetSpace` per space, not a few per alert.
       */
      const prepare = Effect.fnUntraced(function*(batch: ReadonlyArray<AlertOpened>) {
        const rules = yield* sql.query<RuleRow>(
          "SELECT id, name, severity, type, notification_template_id FROM alert_rules WHERE id = ANY($1::text[])",
          [[...new Set(batch.map((o) => o.alert.alertRule.id))]]
        )
        const templateIds = [...new Set(rules.flatMap((r) => (r.notification_template_id === null ? [] : [r.notification_template_id])))]
        const templates = templateIds.length === 0 ? [] : yield* sql.query<TemplateRow>(
          "SELECT id, title, body, type, webhook_url, webhook_headers, config FROM notification_templates WHERE id = ANY($1::text[])",
          [templateIds]
        )
        const recipients = yield* recipientsOf([...new Set(batch.flatMap((o) => (o.alert.device?.space?.id === undefined ? [] : [o.alert.device.space.id])))])
        const ruleById = new Map(rules.map((r) => [r.id, r]))
        const templateById = new Map(templates.map((t) => [t.id, t]))
        return batch.flatMap(({ organisationId, alert }) => {
          const rule = ruleById.get(alert.alertRule.id)
          if (rule === undefined) return []
          const template = rule.notification_template_id === null ? undefined : templateById.get(rule.notification_template_id)
          const spaceId = alert.device?.space?.id
          const to = spaceId === undefined ? [] : recipients.get(spaceId) ?? []
          // An e-mail to nobody is not sent: such alerts (the usual case of a storm of offline
          // alerts in a space with no recipients) cost nothing past this batch.
          if (!reachesAnyone(template === undefined ? null : { type: template.type, webhookUrl: template.webhook_url }, to)) return []
          return [{ organisationId, alert, rule, template, recipients: to }]
        })
      })

      type Prepared = Effect.Success<ReturnType<typeof prepare>>[number]

      /**
       * A failure is logged; work interrupted and nothing else (a space's entity asked as the
       * process stops) is not an error of this service's.
       */
      const logUnlessStopped = (what: string) => (cause: Cause.Cause<unknown>) =>
        Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.logError(what, cause)

      const send = Effect.fnUntraced(function*({ organisationId, alert, rule, template, recipients }: Prepared) {
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
          // Cached pages of alerts show `notifications`: they go, in every process.
          yield* bus.control({ type: "alerts.changed", organisationIds: [organisationId] })
        }
      }, (effect) => effect.pipe(Effect.catchCause(logUnlessStopped("alert notification failed"))))

      const ready = yield* Queue.bounded<Prepared>(NOTIFY_CONCURRENCY)
      // One fiber reads for batches of what was opened; the senders take the notifications one by one.
      yield* Effect.forkScoped(Effect.forever(
        Queue.takeBetween(notices, 1, BATCH).pipe(
          Effect.flatMap(prepare),
          Effect.flatMap((prepared) => Queue.offerAll(ready, prepared)),
          Effect.catchCause(logUnlessStopped("alert notifications failed"))
        )
      ))
      for (let i = 0; i < NOTIFY_CONCURRENCY; i++) {
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(ready), send)))
      }
      return AlertNotifications.of({ opened: (opened) => (opened.length === 0 ? Effect.void : Effect.asVoid(Queue.offerAll(notices, opened))) })
    })
  )
}
