import { Clock, Config, ConfigProvider, Context, Effect, Layer, Option, Redacted } from "effect"
import { smtpTransport, type MailTransport, type Recipient } from "./mail.ts"
import { DeliveryFailure, defaultRetryPolicy, withRetry, type Attempted, type RetryPolicy } from "./retry.ts"
import { jsonText, renderTemplate, type TemplateData } from "./template.ts"
import { postOnce, prepareWebhook, type Fetch } from "./webhook.ts"
import { countNotification } from "../metrics.ts"

export type { MailMessage, MailReceipt, MailTransport, Recipient } from "./mail.ts"
export { DeliveryFailure, defaultRetryPolicy, type RetryPolicy } from "./retry.ts"
export type { Fetch } from "./webhook.ts"

/** Further fields of the objects below are available to templates too (`{{alert.firstSeenAt}}`). */
type Fields = { readonly [field: string]: unknown }

export type AlertInfo = Fields & { readonly id: string }
export type AlertRuleInfo = Fields & {
  readonly id: string
  readonly name: string
  readonly severity: string
  readonly type: string
}
export type DeviceInfo = Fields & { readonly id: string; readonly name?: string | null | undefined }
export type EventInfo = Fields & { readonly name: string; readonly data?: unknown }

/** A stored NotificationTemplate (service interface); empty strings count as absent. */
export interface NotificationTemplate {
  readonly title?: string | null | undefined
  readonly body?: string | null | undefined
  /** `"webhook"` or `"email"`; absent or other: webhook when `webhookUrl` is set, else e-mail. */
  readonly type?: string | null | undefined
  readonly webhookUrl?: string | null | undefined
  readonly webhookHeaders?: Readonly<Record<string, string>> | null | undefined
  readonly config?: unknown
}

/** Everything a notification about one alert may mention. */
export interface NotificationRequest {
  readonly alert: AlertInfo
  readonly rule: AlertRuleInfo
  readonly device: DeviceInfo | null
  readonly event: EventInfo | null
  /** The rule's template; `null` sends the default e-mail to `recipients`. */
  readonly template: NotificationTemplate | null
  /** The space's alert subscribers. */
  readonly recipients: ReadonlyArray<Recipient>
}

/** Stored on the alert (`alerts.notifications`); `at` is epoch ms when the delivery ended. */
export interface WebhookOutcome {
  readonly channel: "webhook"
  readonly url: string
  readonly status: "delivered" | "failed"
  readonly attempts: number
  readonly lastStatusCode?: number
  readonly error?: string
  readonly at: number
}

export interface EmailOutcome {
  readonly channel: "email"
  readonly recipients: ReadonlyArray<string>
  /** `logged`: no `SMTP_URL`, the message went to the log instead. */
  readonly status: "delivered" | "failed" | "logged"
  readonly attempts: number
  /** Recipients the SMTP server refused while accepting the message for the others. */
  readonly rejected?: ReadonlyArray<string>
  readonly error?: string
  readonly at: number
}

export type NotificationOutcome = WebhookOutcome | EmailOutcome

export interface NotifierService {
  /**
   * Delivers the notifications of one alert and says what became of them.
   * Never fails, but takes as long as the retries do (up to about a minute):
   * run it in its own fiber, not in an actor's mailbox.
   *
   * Channel: template `type` `"webhook"` → webhook; `"email"` → e-mail to
   * `recipients`; otherwise webhook when the template has a `webhookUrl`, else
   * e-mail. No recipients for an e-mail → no outcome.
   */
  notify(request: NotificationRequest): Effect.Effect<ReadonlyArray<NotificationOutcome>>
}

export interface NotifierOptions {
  /** The SMTP transport; absent, e-mails are logged instead of sent. */
  readonly mail?: MailTransport | undefined
  /** `From` of e-mails. */
  readonly from?: string | undefined
  /** Defaults to the global `fetch`. */
  readonly fetch?: Fetch | undefined
  /** Tests shorten the delays. */
  readonly retry?: Partial<RetryPolicy> | undefined
}

export const defaultFrom = "Voltaic <alerts@voltaic.local>"

/** `SMTP_URL` (unset or empty: e-mails are logged) and `SMTP_FROM`. */
export const NotifierConfig = Config.all({
  smtpUrl: Config.Redacted("SMTP_URL").pipe(
    Config.option,
    Config.mapEffect((url): Effect.Effect<Option.Option<Redacted.Redacted<string>>, Config.ConfigError> => {
      if (Option.isNone(url) || Redacted.value(url.value).trim() === "") return Effect.succeed(Option.none())
      const text = Redacted.value(url.value)
      const scheme = URL.canParse(text) ? new URL(text).protocol : ""
      return scheme === "smtp:" || scheme === "smtps:"
        ? Effect.succeed(url)
        : Effect.fail(new Config.ConfigError(new ConfigProvider.SourceError({ message: "SMTP_URL: must be an smtp:// or smtps:// URL" })))
    })
  ),
  smtpFrom: Config.String("SMTP_FROM").pipe(Config.withDefault(defaultFrom))
})

const nonEmpty = (text: string | null | undefined): string | undefined => (text === null || text === undefined || text === "" ? undefined : text)

const templateData = (request: NotificationRequest): TemplateData => ({
  alert: request.alert,
  alertRule: request.rule,
  device: request.device,
  event: request.event
})

const defaultTitle = (request: NotificationRequest): string => {
  const device = request.device === null ? "" : `: ${nonEmpty(request.device.name ?? undefined) ?? request.device.id}`
  return `[${request.rule.severity}] ${request.rule.name}${device}`
}

const defaultText = (request: NotificationRequest): string =>
  [
    `Alert ${request.alert.id} raised by rule "${request.rule.name}" (${request.rule.type}, severity ${request.rule.severity}).`,
    request.device === null ? undefined : `Device: ${nonEmpty(request.device.name ?? undefined) ?? "(unnamed)"} (${request.device.id})`,
    request.event === null ? undefined : `Event: ${request.event.name} ${jsonText(request.event.data) ?? ""}`.trimEnd()
  ]
    .filter((line) => line !== undefined)
    .join("\n")

/** Without a template body, the webhook receives the alert itself. */
const defaultWebhookBody = (request: NotificationRequest, title: string): string =>
  jsonText({ title, alert: request.alert, alertRule: request.rule, device: request.device, event: request.event }) ??
    JSON.stringify({ title, alert: { id: request.alert.id } })

/** Where an alert's webhook goes, for logs: the origin only, as paths and queries often carry the receiver's secret. */
const logTarget = (url: string) => (URL.canParse(url) ? new URL(url).origin : "(invalid URL)")

/** A notifier from its parts: the live layer passes nodemailer's SMTP transport, tests a fake one. */
export const makeNotifier = (options: NotifierOptions = {}): NotifierService => {
  const fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init))
  const from = options.from ?? defaultFrom
  const policy: RetryPolicy = { ...defaultRetryPolicy, ...options.retry }

  const webhook = Effect.fnUntraced(function*(request: NotificationRequest, url: string, headers: Readonly<Record<string, string>>, body: string) {
    const prepared = prepareWebhook({ url, headers, body })
    const attempted: Attempted<number> = prepared instanceof DeliveryFailure
      ? { _tag: "failure", failure: prepared, attempts: 0 }
      : yield* withRetry(postOnce(fetch, prepared.url, prepared.headers, body), policy)
    const at = yield* Clock.currentTimeMillis
    if (attempted._tag === "success") {
      yield* Effect.logDebug("webhook delivered", { alert: request.alert.id, to: logTarget(url), attempts: attempted.attempts })
      return { channel: "webhook", url, status: "delivered", attempts: attempted.attempts, lastStatusCode: attempted.value, at } satisfies WebhookOutcome
    }
    const { failure } = attempted
    yield* Effect.logWarning("webhook not delivered", { alert: request.alert.id, to: logTarget(url), attempts: attempted.attempts, error: failure.message })
    return {
      channel: "webhook",
      url,
      status: "failed",
      attempts: attempted.attempts,
      ...(failure.statusCode === undefined ? {} : { lastStatusCode: failure.statusCode }),
      error: failure.message,
      at
    } satisfies WebhookOutcome
  })

  const email = Effect.fnUntraced(function*(request: NotificationRequest, subject: string, text: string) {
    const recipients = request.recipients.map((r) => r.emailAddress)
    if (options.mail === undefined) {
      // Recipients and subject only: the body may quote device data.
      yield* Effect.logInfo("e-mail not sent (SMTP_URL is not set)", { alert: request.alert.id, recipients, subject })
      return { channel: "email", recipients, status: "logged", attempts: 0, at: yield* Clock.currentTimeMillis } satisfies EmailOutcome
    }
    const attempted = yield* withRetry(options.mail.send({ from, to: request.recipients, subject, text }), policy)
    const at = yield* Clock.currentTimeMillis
    if (attempted._tag === "success") {
      const { rejected } = attempted.value
      yield* Effect.logDebug("e-mail sent", { alert: request.alert.id, recipients, attempts: attempted.attempts })
      return {
        channel: "email",
        recipients,
        status: "delivered",
        attempts: attempted.attempts,
        ...(rejected.length === 0 ? {} : { rejected }),
        at
      } satisfies EmailOutcome
    }
    yield* Effect.logWarning("e-mail not sent", { alert: request.alert.id, recipients, attempts: attempted.attempts, error: attempted.failure.message })
    return { channel: "email", recipients, status: "failed", attempts: attempted.attempts, error: attempted.failure.message, at } satisfies EmailOutcome
  })

  const deliver = (request: NotificationRequest, channel: "webhook" | "email", url: string | undefined): Effect.Effect<ReadonlyArray<NotificationOutcome>> => {
    if (!reachesAnyone(request.template, request.recipients)) return Effect.succeed([])
    const data = templateData(request)
    const title = nonEmpty(request.template?.title)
    const body = nonEmpty(request.template?.body)
    const subject = title === undefined ? defaultTitle(request) : renderTemplate(title, data)
    if (channel === "webhook") {
      // A body written as JSON keeps its shape whatever the device's names and data hold.
      const payload = body === undefined ? defaultWebhookBody(request, subject) : renderTemplate(body, data, /^\s*[[{]/.test(body) ? "json" : "none")
      return Effect.map(webhook(request, url ?? "", request.template?.webhookHeaders ?? {}, payload), (outcome) => [outcome])
    }
    const text = body === undefined ? defaultText(request) : renderTemplate(body, data)
    return Effect.map(email(request, subject, text), (outcome) => [outcome])
  }

  const notify = (request: NotificationRequest): Effect.Effect<ReadonlyArray<NotificationOutcome>> => {
    const url = nonEmpty(request.template?.webhookUrl)
    const channel = channelOf(request.template)
    return Effect.suspend(() => deliver(request, channel, url)).pipe(
      Effect.tap((outcomes) => Effect.sync(() => {
        for (const outcome of outcomes) countNotification(outcome.channel, outcome.status)
      })),
      // A bug here must not take the alert down with it: say so in the outcome.
      Effect.catchDefect((defect) =>
        Effect.gen(function*() {
          yield* Effect.logError("notification failed with a defect", { alert: request.alert.id }, defect)
          const at = yield* Clock.currentTimeMillis
          const error = `internal error: ${defect instanceof Error ? defect.message : String(defect)}`
          return channel === "webhook"
            ? [{ channel: "webhook", url: url ?? "", status: "failed", attempts: 0, error, at } satisfies WebhookOutcome]
            : [{ channel: "email", recipients: request.recipients.map((r) => r.emailAddress), status: "failed", attempts: 0, error, at } satisfies EmailOutcome]
        })
      )
    )
  }

  return { notify }
}

/** How a template sends: its type, else by webhook when it has a URL, else by e-mail (no template: the default e-mail). */
export const channelOf = (template: NotificationTemplate | null): "webhook" | "email" => {
  const type = template?.type
  return type === "email" || type === "webhook" ? type : nonEmpty(template?.webhookUrl) === undefined ? "email" : "webhook"
}

/** Whether a notification reaches anyone: an e-mail needs recipients (a webhook is tried, and its failure recorded). */
export const reachesAnyone = (template: NotificationTemplate | null, recipients: ReadonlyArray<unknown>): boolean =>
  channelOf(template) === "webhook" || recipients.length > 0

/** Sends alert notifications: webhooks and e-mail (service interface, API-DECISIONS "Alerts"). */
export class Notifier extends Context.Service<Notifier, NotifierService>()("voltaic/notify/Notifier") {
  /** SMTP through nodemailer when `SMTP_URL` is set, else e-mails are logged; webhooks with the global `fetch`. */
  static readonly layer = Layer.effect(
    Notifier,
    Effect.gen(function*() {
      const config = yield* NotifierConfig
      const mail = Option.isSome(config.smtpUrl) ? yield* smtpTransport(config.smtpUrl.value) : undefined
      return Notifier.of(makeNotifier({ mail, from: config.smtpFrom }))
    })
  )

  /** Built from parts, e.g. an injected `fetch`, a fake mail transport and millisecond retries. */
  static readonly layerWith = (options: NotifierOptions) => Layer.succeed(Notifier, Notifier.of(makeNotifier(options)))

  /** Sends nothing: records each request in `sent` and answers no outcome (for tests of the callers). */
  static readonly layerRecording = (sent: Array<NotificationRequest>) =>
    Layer.succeed(
      Notifier,
      Notifier.of({
        notify: (request) =>
          Effect.sync(() => {
            sent.push(request)
            return []
          })
      })
    )
}
