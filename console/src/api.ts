/** The REST interface under /v1, with the signed-in credential, and its errors as readable messages. */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string
  ) {
    super(message)
  }
}

export interface Session {
  /** A user token (u_at_…) or an application key (a_sk_…). */
  readonly credential: string
  readonly kind: "user" | "app"
  /** True for a read-only application key: the console offers nothing that changes things. */
  readonly readOnly: boolean
  /** An organisation admin (users, teams) or a writable application key. */
  readonly admin: boolean
  readonly who: string
  readonly organisation: { readonly id: string; readonly name: string }
}

const STORAGE_KEY = "voltaic.session"

let current: Session | undefined = (() => {
  try {
    const text = sessionStorage.getItem(STORAGE_KEY)
    return text === null ? undefined : (JSON.parse(text) as Session)
  } catch {
    return undefined
  }
})()

const listeners = new Set<() => void>()
/** Why the last session ended, shown on the sign-in page. */
let endedBecause: string | undefined

export const session = (): Session | undefined => current
export const sessionEndReason = (): string | undefined => endedBecause

export const onSessionChange = (listener: () => void): (() => void) => {
  listeners.add(listener)
  return () => listeners.delete(listener)
}

export const setSession = (next: Session | undefined, reason?: string): void => {
  current = next
  endedBecause = next === undefined ? reason : undefined
  if (next === undefined) sessionStorage.removeItem(STORAGE_KEY)
  else sessionStorage.setItem(STORAGE_KEY, JSON.stringify(next))
  for (const listener of listeners) listener()
}

export interface Answer<T> {
  readonly data: T
  /** X-Total-Count of a list. */
  readonly total: number | undefined
}

type Query = Record<string, string | number | boolean | undefined>

export const queryString = (query: Query | undefined): string => {
  if (query === undefined) return ""
  const params = new URLSearchParams()
  for (const [key, value] of Object.entries(query)) if (value !== undefined && value !== "") params.set(key, String(value))
  const text = params.toString()
  return text === "" ? "" : `?${text}`
}

const errorOf = async (response: Response): Promise<ApiError> => {
  try {
    const body = (await response.json()) as { error?: { code?: string; message?: string; field?: string } }
    if (body.error?.message !== undefined) return new ApiError(response.status, body.error.code ?? "error", body.error.message, body.error.field)
  } catch {
    // Not JSON: a proxy's page, or a server gone.
  }
  return new ApiError(response.status, "error", `the server answered ${response.status} ${response.statusText}`)
}

/** One call; a 401 while signed in ends the session (an expired or revoked credential). */
export const call = async <T>(method: string, path: string, options: { body?: unknown; query?: Query; credential?: string } = {}): Promise<Answer<T>> => {
  const credential = options.credential ?? current?.credential
  const headers: Record<string, string> = { accept: "application/json" }
  if (credential !== undefined) headers.authorization = `Bearer ${credential}`
  if (options.body !== undefined) headers["content-type"] = "application/json"
  let response: Response
  try {
    response = await fetch(`/v1${path}${queryString(options.query)}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body)
    })
  } catch {
    throw new ApiError(0, "network", "the server cannot be reached; check that Voltaic is running")
  }
  if (!response.ok) {
    const error = await errorOf(response)
    if (response.status === 401 && options.credential === undefined && current !== undefined) {
      setSession(undefined, `Your session ended: ${error.message}. Sign in again.`)
    }
    throw error
  }
  const total = response.headers.get("x-total-count")
  const data = response.status === 204 ? (undefined as T) : ((await response.json()) as T)
  return { data, total: total === null ? undefined : Number(total) }
}

export const get = async <T>(path: string, query?: Query): Promise<T> => (await call<T>("GET", path, { query })).data
export const post = async <T>(path: string, body?: unknown): Promise<T> => (await call<T>("POST", path, { body: body ?? {} })).data
export const put = async <T>(path: string, body?: unknown): Promise<T> => (await call<T>("PUT", path, { body: body ?? {} })).data
export const del = async <T>(path: string, body?: unknown): Promise<T> => (await call<T>("DELETE", path, { body })).data

/** What an error says to a person. */
export const messageOf = (error: unknown): string => {
  if (error instanceof ApiError) {
    if (error.status === 403) return `Not allowed: ${error.message}`
    if (error.status >= 500) return `The server failed: ${error.message}`
    return error.message
  }
  return error instanceof Error ? error.message : String(error)
}
