import { useEffect, useState } from "preact/hooks"
import { get, post, put } from "../api.ts"
import type { AlertRule, NotificationTemplate, Space } from "../types.ts"
import { Notice, canWrite, useAction, useLoad } from "../ui/kit.tsx"

type Draft = {
  id?: string
  name: string
  type: AlertRule["type"]
  severity: AlertRule["severity"]
  enabled: boolean
  autoResolve: boolean
  spaceId: string
  templateId: string
  config: Record<string, string>
}

const FIELDS: Record<AlertRule["type"], ReadonlyArray<[string, "text" | "number"]>> = {
  offline: [["afterSeconds", "number"]],
  threshold: [["eventName", "text"], ["path", "text"], ["min", "number"], ["max", "number"]],
  anomaly: [["eventName", "text"], ["path", "text"], ["window", "number"], ["zScore", "number"]]
}

const blank = (): Draft => ({ name: "", type: "threshold", severity: "high", enabled: true, autoResolve: false, spaceId: "", templateId: "", config: {} })

const draftOf = (rule: AlertRule): Draft => ({
  id: rule.id,
  name: rule.name,
  type: rule.type,
  severity: rule.severity,
  enabled: rule.enabled,
  autoResolve: rule.autoResolve,
  spaceId: rule.space?.id ?? "",
  templateId: rule.notificationTemplate?.id ?? "",
  config: Object.fromEntries(Object.entries(rule.config).map(([k, v]) => [k, String(v)]))
})

/** The config as the interface takes it: numbers as numbers, empty fields left out. */
const configOf = (draft: Draft): Record<string, string | number> => {
  const config: Record<string, string | number> = {}
  for (const [field, kind] of FIELDS[draft.type]) {
    const value = draft.config[field]?.trim() ?? ""
    if (value !== "") config[field] = kind === "number" ? Number(value) : value
  }
  return config
}

/** Alert rules: a list, and a form that creates one or edits the one picked. */
export const Rules = ({ rules, error, spaces, templatesRound, onChange }: {
  rules: ReadonlyArray<AlertRule>
  error: unknown
  spaces: ReadonlyArray<Space>
  /** Moves when a template is created or edited: the picker reads them again. */
  templatesRound: number
  onChange: () => void
}) => {
  const [draft, setDraft] = useState<Draft>(blank())
  const templates = useLoad(() => get<{ notificationTemplates: Array<NotificationTemplate> }>("/notificationTemplates", { limit: 200 }).then((r) => r.notificationTemplates), [templatesRound])
  const action = useAction()
  useEffect(() => action.clear(), [draft.id])
  const set = (patch: Partial<Draft>) => setDraft((d) => ({ ...d, ...patch }))
  const save = (event: Event) => {
    event.preventDefault()
    void action.run(async () => {
      const common = {
        name: draft.name,
        severity: draft.severity,
        enabled: draft.enabled,
        autoResolve: draft.autoResolve,
        space: draft.spaceId === "" ? null : { id: draft.spaceId },
        notificationTemplate: draft.templateId === "" ? null : { id: draft.templateId },
        config: configOf(draft)
      }
      if (draft.id === undefined) await post<AlertRule>("/alertRules", { ...common, type: draft.type })
      else await put<AlertRule>(`/alertRules/${encodeURIComponent(draft.id)}`, common)
      setDraft(blank())
      onChange()
    })
  }
  return (
    <div>
      <Notice error={error} />
      <table class="grid" data-testid="rules">
        <thead>
          <tr><th>Name</th><th>Type</th><th>Severity</th><th>Config</th><th>Enabled</th><th /></tr>
        </thead>
        <tbody>
          {rules.map((rule) => (
            <tr key={rule.id}>
              <td>{rule.name}</td>
              <td>{rule.type}</td>
              <td>{rule.severity}</td>
              <td><code>{JSON.stringify(rule.config)}</code></td>
              <td>{rule.enabled ? "yes" : "no"}</td>
              <td>{canWrite() ? <button type="button" onClick={() => setDraft(draftOf(rule))}>Edit</button> : null}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {canWrite() ? (
        <form class="editor" onSubmit={save} data-testid="rule-form">
          <h3>{draft.id === undefined ? "New rule" : `Edit ${draft.name}`}</h3>
          <label>Name <input name="ruleName" required value={draft.name} onInput={(e) => set({ name: e.currentTarget.value })} /></label>
          <label>Type
            <select name="ruleType" value={draft.type} disabled={draft.id !== undefined} onChange={(e) => set({ type: e.currentTarget.value as Draft["type"], config: {} })}>
              <option value="offline">offline</option>
              <option value="threshold">threshold</option>
              <option value="anomaly">anomaly</option>
            </select>
          </label>
          <label>Severity
            <select name="severity" value={draft.severity} onChange={(e) => set({ severity: e.currentTarget.value as Draft["severity"] })}>
              {["low", "medium", "high", "critical"].map((s) => <option key={s} value={s}>{s}</option>)}
            </select>
          </label>
          {FIELDS[draft.type].map(([field, kind]) => (
            <label key={field}>{field}
              <input name={field} inputMode={kind === "number" ? "decimal" : "text"} value={draft.config[field] ?? ""} onInput={(e) => set({ config: { ...draft.config, [field]: e.currentTarget.value } })} />
            </label>
          ))}
          <label>Space
            <select name="ruleSpace" value={draft.spaceId} onChange={(e) => set({ spaceId: e.currentTarget.value })}>
              <option value="">every space</option>
              {spaces.map((s) => <option key={s.id} value={s.id}>{s.name}</option>)}
            </select>
          </label>
          <label>Template
            <select name="ruleTemplate" value={draft.templateId} onChange={(e) => set({ templateId: e.currentTarget.value })}>
              <option value="">none</option>
              {(templates.value ?? []).map((t) => <option key={t.id} value={t.id}>{t.title || t.id}</option>)}
            </select>
          </label>
          <label><input type="checkbox" checked={draft.enabled} onChange={(e) => set({ enabled: e.currentTarget.checked })} /> enabled</label>
          <label><input type="checkbox" checked={draft.autoResolve} onChange={(e) => set({ autoResolve: e.currentTarget.checked })} /> resolves itself</label>
          <Notice error={action.error} />
          <button type="submit" disabled={action.busy}>{draft.id === undefined ? "Create rule" : "Save rule"}</button>
          {draft.id === undefined ? null : <button type="button" onClick={() => setDraft(blank())}>Cancel</button>}
        </form>
      ) : null}
    </div>
  )
}
