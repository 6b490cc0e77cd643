import { useEffect, useState } from "preact/hooks"
import { call, put } from "../api.ts"
import { onLive } from "../live.ts"
import type { Alert } from "../types.ts"
import { when } from "../ui/format.ts"
import { Link, Notice, Pager, canWrite, useAction, useLoad } from "../ui/kit.tsx"

const PAGE = 25

/** Alerts matching `query`, with acknowledge and resolve; follows alerts as they open and close. */
export const AlertTable = ({ query, round = 0, compact = false }: { query: Record<string, string | boolean | undefined>; round?: number; compact?: boolean }) => {
  const [page, setPage] = useState(0)
  const [live, setLive] = useState(0)
  const key = JSON.stringify(query)
  useEffect(() => setPage(0), [key])
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined
    const off = onLive((message) => {
      if (message.kind !== "alert") return
      timer ??= setTimeout(() => {
        timer = undefined
        setLive((n) => n + 1)
      }, 100)
    })
    return () => {
      off()
      if (timer !== undefined) clearTimeout(timer)
    }
  }, [])
  const list = useLoad(() => call<Array<Alert>>("GET", "/alerts", { query: { ...query, limit: PAGE, page } }), [key, page, round, live])
  const action = useAction()
  const change = (alert: Alert, body: Record<string, number>) =>
    void action.run(async () => {
      await put<Alert>(`/alerts/${encodeURIComponent(alert.id)}/resolve`, body)
      list.reload()
    })
  const alerts = list.value?.data ?? []
  return (
    <div>
      <Notice error={list.error ?? action.error} />
      <table class="grid" data-testid="alerts">
        <thead>
          <tr>
            <th>Rule</th>
            <th>Severity</th>
            {compact ? null : <th>Device</th>}
            <th>State</th>
            <th>First seen</th>
            <th>Last seen</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {alerts.length === 0 ? (
            <tr>
              <td colSpan={7} class="muted">
                No alerts.
              </td>
            </tr>
          ) : null}
          {alerts.map((alert) => (
            <tr key={alert.id} data-alert={alert.id} data-state={alert.state}>
              <td>{alert.alertRule.name}</td>
              <td class={`severity ${alert.alertRule.severity}`}>{alert.alertRule.severity}</td>
              {compact ? null : <td>{alert.device === null ? "–" : <Link to={`/devices/${alert.device.id}`}>{alert.device.name}</Link>}</td>}
              <td class="alert-state">{alert.state}</td>
              <td>{when(alert.firstSeenAt)}</td>
              <td>{when(alert.lastSeenAt)}</td>
              <td>
                {canWrite() && alert.state === "unresolved" ? (
                  <button type="button" disabled={action.busy} onClick={() => change(alert, { acknowledgedAt: Date.now() })}>
                    Acknowledge
                  </button>
                ) : null}
                {canWrite() && alert.state !== "resolved" ? (
                  <button type="button" disabled={action.busy} onClick={() => change(alert, { resolvedAt: Date.now() })}>
                    Resolve
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <Pager page={page} size={PAGE} total={list.value?.total} onPage={setPage} />
    </div>
  )
}
