import { useState } from "preact/hooks"
import { get } from "../api.ts"
import type { AlertRule, Space } from "../types.ts"
import { useLoad } from "../ui/kit.tsx"
import { AlertTable } from "./AlertTable.tsx"
import { Rules } from "./Rules.tsx"
import { Templates } from "./Templates.tsx"

/** Alerts with the interface's filters; rules and notification templates below. */
export const Alerts = () => {
  const [status, setStatus] = useState<"open" | "resolved" | "all">("open")
  const [spaceId, setSpaceId] = useState("")
  const [ruleId, setRuleId] = useState("")
  const [productId, setProductId] = useState("")
  const [since, setSince] = useState("")
  const [sort, setSort] = useState<"DESC" | "ASC">("DESC")
  const [round, setRound] = useState(0)
  const [templatesRound, setTemplatesRound] = useState(0)
  const spaces = useLoad(() => get<{ spaces: Array<Space> }>("/spaces", { limit: 200 }).then((r) => r.spaces), [])
  const products = useLoad(() => get<{ products: Array<{ id: string; name: string }> }>("/products", { limit: 200 }).then((r) => r.products), [])
  const rules = useLoad(() => get<{ alertRules: Array<AlertRule> }>("/alertRules", { limit: 200 }).then((r) => r.alertRules), [round])
  const query = {
    unresolved: status === "open" ? true : undefined,
    resolved: status === "resolved" ? true : undefined,
    "space.id": spaceId || undefined,
    "alertRule.id": ruleId || undefined,
    "product.id": productId || undefined,
    since: since === "" ? undefined : new Date(since).toISOString(),
    sort
  }
  return (
    <section>
      <h1>Alerts</h1>
      <div class="inline">
        <select name="status" value={status} onChange={(e) => setStatus(e.currentTarget.value as typeof status)}>
          <option value="open">Open</option>
          <option value="resolved">Resolved</option>
          <option value="all">All</option>
        </select>
        <select name="space" value={spaceId} onChange={(e) => setSpaceId(e.currentTarget.value)}>
          <option value="">Every space</option>
          {(spaces.value ?? []).map((s) => <option key={s.id} value={s.id}>{s.name}</option>)}
        </select>
        <select name="rule" value={ruleId} onChange={(e) => setRuleId(e.currentTarget.value)}>
          <option value="">Every rule</option>
          {(rules.value ?? []).map((r) => <option key={r.id} value={r.id}>{r.name}</option>)}
        </select>
        <select name="product" value={productId} onChange={(e) => setProductId(e.currentTarget.value)}>
          <option value="">Every product</option>
          {(products.value ?? []).map((p) => <option key={p.id} value={p.id}>{p.name}</option>)}
        </select>
        <label>since <input name="since" type="datetime-local" value={since} onChange={(e) => setSince(e.currentTarget.value)} /></label>
        <select name="sort" value={sort} onChange={(e) => setSort(e.currentTarget.value as typeof sort)}>
          <option value="DESC">newest first</option>
          <option value="ASC">oldest first</option>
        </select>
      </div>
      <AlertTable query={query} />
      <h2>Alert rules</h2>
      <Rules rules={rules.value ?? []} error={rules.error} spaces={spaces.value ?? []} templatesRound={templatesRound} onChange={() => setRound((n) => n + 1)} />
      <h2>Notification templates</h2>
      <Templates onChange={() => setTemplatesRound((n) => n + 1)} />
    </section>
  )
}
