import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { afterEach, describe, expect, it } from "vitest"
import { makeNotifier, type Fetch, type NotificationOutcome, type WebhookOutcome } from "../../src/notify/Notifier.ts"
import { alertRequest, fastRetry, run, unreachableUrl, webhookReceiver, type Reply } from "./support.ts"

const closers: Array<() => Promise<void>> = []
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()))
})

const receiver = async (replies: ReadonlyArray<Reply>) => {
  const r = await webhookReceiver(replies)
  closers.push(r.close)
  return r
}

const notifier = makeNotifier({ retry: fastRetry })

const single = (outcomes: ReadonlyArray<NotificationOutcome>): WebhookOutcome => {
  expect(outcomes).toHaveLength(1)
  const [outcome] = outcomes
  if (outcome.channel !== "webhook") throw new Error(`expected a webhook outcome, got ${outcome.channel}`)
  return outcome
}

describe("webhook notifications", () => {
  it("are retried after 503s until the receiver accepts, with the template's headers and rendered body", async () => {
    const hook = await receiver([503, 503, 200])
    const outcome = single(
      await run(
        notifier.notify(
          alertRequest({
            type: "webhook",
            title: "{{alertRule.name}}",
            body: '{"text":"{{alertRule.name}}: {{device.name}} ({{device.id}})","alert":"{{alert.id}}","data":{{event.data}}}',
            webhookUrl: hook.url,
            webhookHeaders: { Authorization: "Bearer hook-secret", "X-Voltaic-Test": "yes" }
          })
        )
      )
    )
    expect(outcome).toMatchObject({ channel: "webhook", url: hook.url, status: "delivered", attempts: 3, lastStatusCode: 200 })
    expect(outcome.error).toBeUndefined()
    expect(typeof outcome.at).toBe("number")
    expect(hook.received).toHaveLength(3)
    const last = hook.received[2]
    expect(last.method).toBe("POST")
    expect(last.headers["authorization"]).toBe("Bearer hook-secret")
    expect(last.headers["x-voltaic-test"]).toBe("yes")
    expect(last.headers["content-type"]).toBe("application/json")
    expect(JSON.parse(last.body)).toEqual({ text: "Boiler offline: Boiler (dev_1)", alert: "alr_1", data: { battery: 12, flags: ["low"] } })
  })

  it("send a JSON body of the template's own shape whatever the device's name holds", async () => {
    const hook = await receiver([200])
    const request = alertRequest({
      type: "webhook",
      body: '{"alert":"{{alert.id}}","device":"{{device.name}}","data":"{{event.data}}"}',
      webhookUrl: hook.url
    })
    const forged = { ...request, device: { id: "dev_1", name: 'Boiler","alert":"alt_FORGED' } }
    expect(single(await run(notifier.notify(forged))).status).toBe("delivered")
    expect(hook.received[0].headers["content-type"]).toBe("application/json")
    expect(JSON.parse(hook.received[0].body)).toEqual({
      alert: "alr_1",
      device: 'Boiler","alert":"alt_FORGED',
      data: JSON.stringify({ battery: 12, flags: ["low"] })
    })
  })

  it("are retried after a 429", async () => {
    const hook = await receiver([429, 204])
    const outcome = single(await run(notifier.notify(alertRequest({ webhookUrl: hook.url, body: "ping" }))))
    expect(outcome).toMatchObject({ status: "delivered", attempts: 2, lastStatusCode: 204 })
  })

  it("fail at once on a 400, keeping the receiver's reason", async () => {
    const hook = await receiver([400])
    const outcome = single(await run(notifier.notify(alertRequest({ type: "webhook", webhookUrl: hook.url, body: "{{device.name}}" }))))
    expect(outcome).toMatchObject({ channel: "webhook", status: "failed", attempts: 1, lastStatusCode: 400, error: "HTTP 400: refused with 400" })
    expect(hook.received).toHaveLength(1)
    expect(hook.received[0].headers["content-type"]).toBe("text/plain; charset=utf-8")
    expect(hook.received[0].body).toBe("Boiler")
  })

  it("fail after the capped number of attempts when nothing listens", async () => {
    const url = await unreachableUrl()
    const outcome = single(await run(notifier.notify(alertRequest({ webhookUrl: url }))))
    expect(outcome).toMatchObject({ channel: "webhook", url, status: "failed", attempts: 5 })
    expect(outcome.lastStatusCode).toBeUndefined()
    expect(outcome.error).toMatch(/ECONNREFUSED/)
  })

  it("give up on an attempt that outlasts the attempt timeout, and try again", async () => {
    const hook = await receiver(["hang", 200])
    const slow = makeNotifier({ retry: { ...fastRetry, attemptTimeout: "200 millis" } })
    const outcome = single(await run(slow.notify(alertRequest({ webhookUrl: hook.url }))))
    expect(outcome).toMatchObject({ status: "delivered", attempts: 2 })
    expect(hook.received).toHaveLength(2)
  })

  it("describe the alert as JSON when the template has no body", async () => {
    const hook = await receiver([200])
    await run(notifier.notify(alertRequest({ title: "{{alertRule.name}} ({{device.name}})", body: "", webhookUrl: hook.url, webhookHeaders: null })))
    expect(hook.received[0].headers["content-type"]).toBe("application/json")
    expect(JSON.parse(hook.received[0].body)).toEqual({
      title: "Boiler offline (Boiler)",
      alert: { id: "alr_1", firstSeenAt: 1_700_000_000_000 },
      alertRule: { id: "rul_1", name: "Boiler offline", severity: "high", type: "offline" },
      device: { id: "dev_1", name: "Boiler" },
      event: { name: "heartbeat", data: { battery: 12, flags: ["low"] } }
    })
  })

  it("stop retrying when the next attempt would start after the time cap", async () => {
    // On TestClock, moved in 10 ms steps: each attempt's start is read from that clock, exactly.
    // Between steps, a few real milliseconds let a failed attempt's rejection reach its fiber,
    // which then sleeps until its retry (the rejection is queued before that real sleep begins).
    let clock = 0
    const calls: Array<number> = []
    const failing: Fetch = () => {
      calls.push(clock)
      return Promise.reject(new TypeError("fetch failed"))
    }
    // Retries 20 ms and 40 ms after a failure fit in 100 ms; the next, 80 ms later, would not.
    const capped = makeNotifier({ fetch: failing, retry: { baseDelay: "20 millis", maxDelay: "10 seconds", maxAttempts: 100, maxElapsed: "100 millis", jitter: false } })
    const outcomes = await run(Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(capped.notify(alertRequest({ webhookUrl: "http://receiver.invalid/hook" })))
      for (let i = 0; i < 30; i++) {
        yield* TestClock.withLive(Effect.sleep("5 millis"))
        clock += 10
        yield* TestClock.adjust("10 millis")
      }
      return yield* Fiber.join(fiber)
    }).pipe(Effect.provide(TestClock.layer())))
    expect(single(outcomes)).toMatchObject({ status: "failed", attempts: 3, error: "fetch failed" })
    expect(calls).toEqual([0, 20, 60])
  })

  it("are not attempted with a URL or headers that cannot be sent", async () => {
    const fetch: Fetch = () => Promise.reject(new Error("must not be called"))
    const strict = makeNotifier({ fetch, retry: fastRetry })
    expect(single(await run(strict.notify(alertRequest({ webhookUrl: "ftp://example.org/x" }))))).toMatchObject({ status: "failed", attempts: 0 })
    expect(single(await run(strict.notify(alertRequest({ type: "webhook" }))))).toMatchObject({ url: "", status: "failed", attempts: 0 })
    const badHeader = alertRequest({ webhookUrl: "http://127.0.0.1:9/x", webhookHeaders: { "bad header": "x" } })
    expect(single(await run(strict.notify(badHeader)))).toMatchObject({ status: "failed", attempts: 0, error: expect.stringMatching(/^invalid webhookHeaders/) })
  })

  it("do not follow redirects", async () => {
    const fetch: Fetch = () => Promise.resolve(new Response(null, { status: 302, headers: { location: "http://elsewhere/" } }))
    const outcome = single(await run(makeNotifier({ fetch, retry: fastRetry }).notify(alertRequest({ webhookUrl: "http://receiver.test/hook" }))))
    expect(outcome).toMatchObject({ status: "failed", attempts: 1, lastStatusCode: 302, error: "HTTP 302: redirect not followed" })
  })
})
