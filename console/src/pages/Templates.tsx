import { useState } from "preact/hooks"
import { get, post, put } from "../api.ts"
import type { NotificationTemplate } from "../types.ts"
import { Notice, canWrite, useAction, useLoad } from "../ui/kit.tsx"

type Draft = { id?: string; type: string; title: string; body: string; webhookUrl: string }
const blank = (): Draft => ({ type: "email", title: "", body: "", webhookUrl: "" })

/** Notification templates: `{{device.name}}`, `{{alertRule.name}}` and the like are filled in when an alert goes out. */
export const Templates = ({ onChange }: { onChange: () => void }) => {
  const [round, setRound] = useState(0)
  const list = useLoad(() => get<{ notificationTemplates: Array<NotificationTemplate> }>("/notificationTemplates", { limit: 200 }).then((r) => r.notificationTemplates), [round])
  const [draft, setDraft] = useState<Draft>(blank())
  const action = useAction()
  const save = (event: Event) => {
    event.preventDefault()
    void action.run(async () => {
      const body = { type: draft.type, title: draft.title, body: draft.body, webhookUrl: draft.webhookUrl === "" ? null : draft.webhookUrl }
      if (draft.id === undefined) await post("/notificationTemplates", body)
      else await put(`/notificationTemplates/${encodeURIComponent(draft.id)}`, body)
      setDraft(blank())
      setRound((n) => n + 1)
      onChange()
    })
  }
  return (
    <div>
      <Notice error={list.error} />
      <table class="grid" data-testid="templates">
        <thead><tr><th>Title</th><th>Type</th><th>Webhook</th><th /></tr></thead>
        <tbody>
          {(list.value ?? []).map((t) => (
            <tr key={t.id}>
              <td>{t.title}</td>
              <td>{t.type}</td>
              <td>{t.webhookUrl ?? ""}</td>
              <td>{canWrite() ? <button type="button" onClick={() => setDraft({ id: t.id, type: t.type, title: t.title, body: t.body, webhookUrl: t.webhookUrl ?? "" })}>Edit</button> : null}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {canWrite() ? (
        <form class="editor" onSubmit={save}>
          <h3>{draft.id === undefined ? "New template" : `Edit ${draft.title}`}</h3>
          <label>Type
            <select name="templateType" value={draft.type} onChange={(e) => setDraft({ ...draft, type: e.currentTarget.value })}>
              <option value="email">email</option>
              <option value="webhook">webhook</option>
            </select>
          </label>
          <label>Title <input name="title" value={draft.title} onInput={(e) => setDraft({ ...draft, title: e.currentTarget.value })} /></label>
          <label>Body <textarea name="body" rows={3} value={draft.body} placeholder="{{device.name}}: {{alertRule.name}}" onInput={(e) => setDraft({ ...draft, body: e.currentTarget.value })} /></label>
          {draft.type === "webhook" ? (
            <label>Webhook URL <input name="webhookUrl" type="url" value={draft.webhookUrl} onInput={(e) => setDraft({ ...draft, webhookUrl: e.currentTarget.value })} /></label>
          ) : null}
          <Notice error={action.error} />
          <button type="submit" disabled={action.busy}>{draft.id === undefined ? "Create template" : "Save template"}</button>
          {draft.id === undefined ? null : <button type="button" onClick={() => setDraft(blank())}>Cancel</button>}
        </form>
      ) : null}
    </div>
  )
}
