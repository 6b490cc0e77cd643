import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type ConsoleHarness, screenshot, signIn, startConsoleHarness } from "./harness.ts"

interface Rule {
  readonly id: string
  readonly name: string
  readonly type: string
  readonly severity: string
  readonly config: Record<string, unknown>
  readonly space: { id: string } | null
  readonly notificationTemplate: { id: string } | null
}

describe("alert rules and notification templates in the console", () => {
  let h: ConsoleHarness
  beforeAll(async () => {
    h = await startConsoleHarness()
  }, 120_000)
  afterAll(async () => {
    await h?.close()
  })

  it("creates a template and a rule that uses it, edits the rule, and names the field the server refused", async () => {
    const space = await h.rest<{ id: string }>("POST", "/spaces", { name: "Cold store" })
    const { page, errors } = await h.page()
    await signIn(page, h.origin)
    await page.getByRole("link", { name: "Alerts" }).click()

    await page.locator("select[name=templateType]").selectOption("webhook")
    await page.locator("input[name=title]").fill("Cold store alarm")
    await page.locator("textarea[name=body]").fill("{{device.name}}: {{alertRule.name}}")
    await page.locator("input[name=webhookUrl]").fill("http://127.0.0.1:9/hook")
    await page.getByRole("button", { name: "Create template" }).click()
    await page.getByTestId("templates").locator("td", { hasText: "Cold store alarm" }).waitFor()
    const { notificationTemplates: [template] } = await h.rest<{ notificationTemplates: Array<{ id: string; type: string }> }>("GET", "/notificationTemplates")
    expect(template.type).toBe("webhook")

    const form = page.getByTestId("rule-form")
    await form.locator("input[name=ruleName]").fill("Too warm")
    await form.locator("select[name=ruleType]").selectOption("threshold")
    await form.locator("input[name=eventName]").fill("temperature")
    await form.locator("input[name=max]").fill("-18")
    await form.locator("select[name=ruleSpace]").selectOption(space.id)
    await form.locator("select[name=ruleTemplate]").selectOption(template.id)
    await form.getByRole("button", { name: "Create rule" }).click()
    await page.getByTestId("rules").locator("td", { hasText: "Too warm" }).waitFor()
    const created = (await h.rest<{ alertRules: Array<Rule> }>("GET", "/alertRules")).alertRules[0]
    expect(created).toMatchObject({ name: "Too warm", type: "threshold", severity: "high", config: { eventName: "temperature", max: -18 }, space: { id: space.id }, notificationTemplate: { id: template.id } })

    await page.getByTestId("rules").locator("tr", { hasText: "Too warm" }).getByRole("button", { name: "Edit" }).click()
    await form.locator("select[name=severity]").selectOption("critical")
    await form.locator("input[name=max]").fill("-15")
    await form.getByRole("button", { name: "Save rule" }).click()
    await page.getByTestId("rules").locator("tr", { hasText: "critical" }).waitFor()
    const edited = await h.rest<Rule>("GET", `/alertRules/${created.id}`)
    expect(edited).toMatchObject({ severity: "critical", config: { eventName: "temperature", max: -15 } })

    // A threshold with neither bound: the server's message names the field.
    await form.locator("input[name=ruleName]").fill("No bounds")
    await form.locator("input[name=eventName]").fill("temperature")
    await form.getByRole("button", { name: "Create rule" }).click()
    await form.locator(".notice.error", { hasText: "config.min" }).waitFor()
    await screenshot(page, "console-rules")
    expect(errors).toEqual([])
  }, 120_000)
})
