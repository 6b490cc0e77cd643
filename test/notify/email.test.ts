import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { smtpTransport } from "../../src/notify/mail.ts"
import {
  makeNotifier,
  Notifier,
  type EmailOutcome,
  type MailMessage,
  type MailTransport,
  type NotificationOutcome,
  type NotificationRequest
} from "../../src/notify/Notifier.ts"
import { alertRequest, fastRetry, parseMail, run, smtpError, smtpSink } from "./support.ts"

const closers: Array<() => Promise<void>> = []
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()))
})

const sink = async (options: Parameters<typeof smtpSink>[0] = {}) => {
  const s = await smtpSink(options)
  closers.push(s.close)
  return s
}

const recipients = [
  { emailAddress: "ada@example.org", fullName: "Ada Lovelace" },
  { emailAddress: "bob@example.org", fullName: null }
]

const emailTemplate = {
  type: "email",
  title: "[{{alertRule.severity}}] {{device.name}} is offline",
  body: "Alert {{alert.id}}: {{alertRule.name}} on {{device.name}} ({{device.id}}).\nLast event {{event.name}}: {{event.data}}"
}

const single = (outcomes: ReadonlyArray<NotificationOutcome>): EmailOutcome => {
  expect(outcomes).toHaveLength(1)
  const [outcome] = outcomes
  if (outcome.channel !== "email") throw new Error(`expected an e-mail outcome, got ${outcome.channel}`)
  return outcome
}

/** `Notifier.layer` as the application builds it, from these environment variables. */
const notifyWithEnv = (env: Record<string, string>, request: NotificationRequest) =>
  Effect.gen(function*() {
    const notifier = yield* Notifier
    return yield* notifier.notify(request)
  }).pipe(Effect.provide(Notifier.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env))))))

/** A notifier over nodemailer to the sink, with millisecond retries. */
const notifyThroughSmtp = (port: number, request: NotificationRequest) =>
  Effect.scoped(
    Effect.gen(function*() {
      const mail = yield* smtpTransport(Redacted.make(`smtp://127.0.0.1:${port}`))
      return yield* makeNotifier({ mail, retry: fastRetry }).notify(request)
    })
  )

describe("e-mail notifications", () => {
  it("reach every recipient over SMTP_URL with the rendered subject and text", async () => {
    const smtp = await sink()
    const env = { SMTP_URL: `smtp://alice:s3cret@127.0.0.1:${smtp.port}`, SMTP_FROM: "Alerts <alerts@voltaic.test>" }
    const outcome = single(await run(notifyWithEnv(env, alertRequest(emailTemplate, recipients))))
    expect(outcome).toMatchObject({ channel: "email", recipients: ["ada@example.org", "bob@example.org"], status: "delivered", attempts: 1 })
    expect(outcome.rejected).toBeUndefined()

    expect(smtp.messages).toHaveLength(1)
    const [message] = smtp.messages
    expect(message.user).toBe("alice")
    expect(message.from).toBe("alerts@voltaic.test")
    expect(message.recipients).toEqual(["ada@example.org", "bob@example.org"])
    const mail = parseMail(message.raw)
    expect(mail.header("Subject")).toBe("[high] Boiler is offline")
    expect(mail.header("From")).toBe("Alerts <alerts@voltaic.test>")
    expect(mail.header("To")).toBe("Ada Lovelace <ada@example.org>, bob@example.org")
    expect(mail.body).toBe('Alert alr_1: Boiler offline on Boiler (dev_1).\nLast event heartbeat: {"battery":12,"flags":["low"]}')
  })

  it("are retried after a transient SMTP reply", async () => {
    let mailFroms = 0
    const smtp = await sink({
      onMailFrom: (_address, _session, callback) => callback(++mailFroms === 1 ? smtpError(451, "try again later") : null)
    })
    const outcome = single(await run(notifyThroughSmtp(smtp.port, alertRequest(emailTemplate, recipients))))
    expect(outcome).toMatchObject({ status: "delivered", attempts: 2 })
    expect(smtp.messages).toHaveLength(1)
  })

  it("fail at once when the server refuses every recipient, and list those it refused", async () => {
    const smtp = await sink({
      onRcptTo: (address, _session, callback) => callback(address.address === "bob@example.org" ? null : smtpError(550, "no such user"))
    })
    const failed = single(await run(notifyThroughSmtp(smtp.port, alertRequest(emailTemplate, recipients.slice(0, 1)))))
    expect(failed).toMatchObject({ status: "failed", attempts: 1, error: expect.stringMatching(/550/) })

    const partial = single(await run(notifyThroughSmtp(smtp.port, alertRequest(emailTemplate, recipients))))
    expect(partial).toMatchObject({ status: "delivered", attempts: 1, rejected: ["ada@example.org"] })
    expect(smtp.messages.map((m) => m.recipients)).toEqual([["bob@example.org"]])
  })

  it("are logged, not sent, without SMTP_URL", async () => {
    const logs: Array<{ level: string; message: unknown }> = []
    const outcome = single(await run(notifyWithEnv({}, alertRequest(emailTemplate, recipients)), logs))
    expect(outcome).toMatchObject({ channel: "email", status: "logged", attempts: 0, recipients: ["ada@example.org", "bob@example.org"] })
    const logged = logs.find((l) => JSON.stringify(l.message).includes("SMTP_URL is not set"))
    expect(logged?.level).toBe("Info")
    const text = JSON.stringify(logged?.message)
    expect(text).toContain("ada@example.org")
    expect(text).toContain("[high] Boiler is offline")
    expect(text).not.toContain("battery")
  })

  it("refuse an SMTP_URL that is not smtp:// or smtps://", async () => {
    await expect(run(notifyWithEnv({ SMTP_URL: "http://mail.example.org" }, alertRequest(emailTemplate, recipients)))).rejects.toThrow(/SMTP_URL/)
  })
})

describe("the notifier", () => {
  const fakeMail = () => {
    const sent: Array<MailMessage> = []
    const mail: MailTransport = { send: (message) => Effect.sync(() => (sent.push(message), { rejected: [] })) }
    return { sent, mail }
  }

  it("e-mails the recipients a default message when the rule has no template", async () => {
    const { sent, mail } = fakeMail()
    const outcome = single(await run(makeNotifier({ mail, from: "x@y.z" }).notify(alertRequest(null, recipients))))
    expect(outcome.status).toBe("delivered")
    expect(sent).toEqual([
      {
        from: "x@y.z",
        to: recipients,
        subject: "[high] Boiler offline: Boiler",
        text: 'Alert alr_1 raised by rule "Boiler offline" (offline, severity high).\nDevice: Boiler (dev_1)\nEvent: heartbeat {"battery":12,"flags":["low"]}'
      }
    ])
  })

  it("follows the template's type over its webhookUrl", async () => {
    const { sent, mail } = fakeMail()
    const outcomes = await run(makeNotifier({ mail }).notify(alertRequest({ ...emailTemplate, webhookUrl: "http://127.0.0.1:9/never" }, recipients)))
    expect(outcomes.map((o) => o.channel)).toEqual(["email"])
    expect(sent).toHaveLength(1)
  })

  it("has nothing to do for an e-mail without recipients", async () => {
    const { sent, mail } = fakeMail()
    expect(await run(makeNotifier({ mail }).notify(alertRequest(emailTemplate, [])))).toEqual([])
    expect(sent).toEqual([])
  })

  it("turns a defect in a transport into a failed outcome", async () => {
    const mail: MailTransport = { send: () => Effect.die(new Error("boom")) }
    const outcome = single(await run(makeNotifier({ mail }).notify(alertRequest(emailTemplate, recipients))))
    expect(outcome).toMatchObject({ status: "failed", error: "internal error: boom" })
  })

  it("has a recording layer for tests of its callers", async () => {
    const requests: Array<NotificationRequest> = []
    const outcomes = await run(
      Effect.gen(function*() {
        return yield* (yield* Notifier).notify(alertRequest(null, recipients))
      }).pipe(Effect.provide(Notifier.layerRecording(requests)))
    )
    expect(outcomes).toEqual([])
    expect(requests.map((r) => r.alert.id)).toEqual(["alr_1"])
  })
})
