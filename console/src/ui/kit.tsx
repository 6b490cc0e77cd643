import type { ComponentChildren } from "preact"
import { useCallback, useEffect, useRef, useState } from "preact/hooks"
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

/**
 * Copies `text`: the Clipboard API where the page is a secure context (https, localhost); on a
 * plain http address it is missing, and the selected text is copied the older way.
 */
const copy = async (text: string, element: HTMLElement | null): Promise<boolean> => {
  try {
    if (navigator.clipboard !== undefined) {
      await navigator.clipboard.writeText(text)
      return true
    }
  } catch {
    // Refused (no permission): try the selection.
  }
  const selection = getSelection()
  if (element === null || selection === null) return false
  const range = document.createRange()
  range.selectNodeContents(element)
  selection.removeAllRanges()
  selection.addRange(range)
  return document.execCommand("copy")
}

/** A secret shown once, with a button that copies it. */
export const Secret = ({ label, value }: { label: string; value: string }) => {
  const [copied, setCopied] = useState<boolean>()
  const code = useRef<HTMLElement>(null)
  return (
    <div class="secret" data-testid="secret">
      <span>{label} (shown once; keep it): </span>
      <code ref={code}>{value}</code>
      <button type="button" onClick={async () => setCopied(await copy(value, code.current))}>
        {copied === true ? "Copied" : copied === false ? "Select it and copy" : "Copy"}
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
