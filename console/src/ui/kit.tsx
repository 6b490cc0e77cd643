import type { ComponentChildren } from "preact"
import { useCallback, useEffect, useState } from "preact/hooks"
import { messageOf, session } from "../api.ts"
import { follow } from "../router.ts"

/** A message in the page, never an alert box: errors name what failed. */
export const Notice = ({ error, kind = "error" }: { error: unknown; kind?: "error" | "info" }) =>
  error === undefined || error === null ? null : (
    <p class={`notice ${kind}`} role={kind === "error" ? "alert" : "status"}>
      {typeof error === "string" ? error : messageOf(error)}
    </p>
  )

export const Link = ({ to, children, class: className }: { to: string; children: ComponentChildren; class?: string }) => (
  <a href={to} class={className} onClick={(event) => follow(event, to)}>
    {children}
  </a>
)

/** A secret shown once, with a button that copies it. */
export const Secret = ({ label, value }: { label: string; value: string }) => {
  const [copied, setCopied] = useState(false)
  return (
    <div class="secret" data-testid="secret">
      <span>{label} (shown once; keep it): </span>
      <code>{value}</code>
      <button
        type="button"
        onClick={async () => {
          try {
            await navigator.clipboard.writeText(value)
            setCopied(true)
          } catch {
            setCopied(false)
          }
        }}
      >
        {copied ? "Copied" : "Copy"}
      </button>
    </div>
  )
}

/** Whether the signed-in credential may change things (a read-only key may not). */
export const canWrite = (): boolean => session()?.readOnly === false
export const isAdmin = (): boolean => session()?.admin === true

/** Loads with `load` whenever `deps` change; `reload` loads again. */
export const useLoad = <T,>(load: () => Promise<T>, deps: ReadonlyArray<unknown>) => {
  const [state, setState] = useState<{ value?: T; error?: unknown; loading: boolean }>({ loading: true })
  const [round, setRound] = useState(0)
  useEffect(() => {
    let current = true
    setState((s) => ({ ...s, loading: true }))
    load().then(
      (value) => current && setState({ value, loading: false }),
      (error: unknown) => current && setState((s) => ({ value: s.value, error, loading: false }))
    )
    return () => {
      current = false
    }
  }, [...deps, round])
  const reload = useCallback(() => setRound((n) => n + 1), [])
  return { ...state, reload }
}

/** Runs an action, keeping its error for the page to show; `busy` while it runs. */
export const useAction = () => {
  const [error, setError] = useState<unknown>()
  const [busy, setBusy] = useState(false)
  const run = async <T,>(action: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true)
    setError(undefined)
    try {
      return await action()
    } catch (e) {
      setError(e)
      return undefined
    } finally {
      setBusy(false)
    }
  }
  return { error, busy, run, clear: () => setError(undefined) }
}

/** Previous and next for a server-paged list. */
export const Pager = ({ page, size, total, onPage }: { page: number; size: number; total: number | undefined; onPage: (page: number) => void }) => {
  const pages = total === undefined ? undefined : Math.max(1, Math.ceil(total / size))
  return (
    <div class="pager">
      <button type="button" disabled={page === 0} onClick={() => onPage(page - 1)}>
        Previous
      </button>
      <span>
        page {page + 1}
        {pages === undefined ? "" : ` of ${pages}`}
        {total === undefined ? "" : ` (${total})`}
      </span>
      <button type="button" disabled={pages !== undefined && page + 1 >= pages} onClick={() => onPage(page + 1)}>
        Next
      </button>
    </div>
  )
}
