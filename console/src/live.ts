import { session, setSession } from "./api.ts"

/** A delivery of `GET /v1/stream`: what MQTT subscribers receive, with its topic and device. */
export interface LiveMessage {
  readonly kind: "event" | "location" | "command" | "alert"
  readonly topic: string
  readonly deviceId: string
  readonly resource: Record<string, unknown>
}

export type LiveStatus = "connecting" | "live" | "reconnecting"

const listeners = new Set<(message: LiveMessage) => void>()
const statusListeners = new Set<(status: LiveStatus) => void>()
let status: LiveStatus = "connecting"
let running: AbortController | undefined

const setStatus = (next: LiveStatus) => {
  status = next
  for (const listener of statusListeners) listener(next)
}

export const liveStatus = (): LiveStatus => status

export const onLive = (listener: (message: LiveMessage) => void): (() => void) => {
  listeners.add(listener)
  return () => listeners.delete(listener)
}

export const onLiveStatus = (listener: (status: LiveStatus) => void): (() => void) => {
  statusListeners.add(listener)
  return () => statusListeners.delete(listener)
}

/** The credential stopped working: the session ends, with the reason on the sign-in page. */
class SessionEnded extends Error {}

/** Server-sent events read with fetch, so the credential goes in a header, never in a URL. */
const readStream = async (credential: string, signal: AbortSignal): Promise<void> => {
  const response = await fetch("/v1/stream", { headers: { authorization: `Bearer ${credential}`, accept: "text/event-stream" }, signal })
  if (response.status === 401) throw new SessionEnded("the credential is unknown, expired or revoked")
  if (!response.ok || response.body === null) throw new Error(`stream answered ${response.status}`)
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ""
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffer += value
    let end = buffer.indexOf("\n\n")
    while (end !== -1) {
      const frame = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      end = buffer.indexOf("\n\n")
      let kind = "message"
      const data: Array<string> = []
      for (const line of frame.split("\n")) {
        if (line.startsWith("event: ")) kind = line.slice(7)
        else if (line.startsWith("data: ")) data.push(line.slice(6))
      }
      if (kind === "ready") setStatus("live")
      if (kind === "expired") throw new SessionEnded("the credential is no longer valid")
      if (kind === "event" || kind === "location" || kind === "command" || kind === "alert") {
        const parsed = JSON.parse(data.join("\n")) as Omit<LiveMessage, "kind">
        const message: LiveMessage = { kind, ...parsed }
        for (const listener of listeners) listener(message)
      }
    }
  }
}

/** Keeps one stream open while signed in, reconnecting after a second, then at most every 10 s. */
export const startLive = (): (() => void) => {
  running?.abort()
  const controller = new AbortController()
  running = controller
  void (async () => {
    let wait = 1000
    while (!controller.signal.aborted) {
      const credential = session()?.credential
      if (credential === undefined) return
      try {
        setStatus(status === "live" ? "reconnecting" : status)
        await readStream(credential, controller.signal)
        wait = 1000
      } catch (error) {
        if (controller.signal.aborted) return
        if (error instanceof SessionEnded) {
          // Only if it is still this session's credential that failed.
          if (session()?.credential === credential) setSession(undefined, `Your session ended: ${error.message}. Sign in again.`)
          return
        }
      }
      setStatus("reconnecting")
      await new Promise((resolve) => setTimeout(resolve, wait))
      wait = Math.min(wait * 2, 10_000)
    }
  })()
  return () => controller.abort()
}
