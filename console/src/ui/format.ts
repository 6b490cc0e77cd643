/** Times as the operator reads them: local, with how long ago. */
export const when = (ms: number | null | undefined): string => {
  if (ms === null || ms === undefined) return "never"
  return new Date(ms).toLocaleString()
}

export const ago = (ms: number | null | undefined, now = Date.now()): string => {
  if (ms === null || ms === undefined) return "never"
  const seconds = Math.max(0, Math.round((now - ms) / 1000))
  if (seconds < 60) return `${seconds} s ago`
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`
  if (seconds < 86_400) return `${Math.round(seconds / 3600)} h ago`
  return `${Math.round(seconds / 86_400)} d ago`
}

export const json = (value: unknown): string => {
  const text = JSON.stringify(value)
  return text === undefined ? "" : text.length > 200 ? `${text.slice(0, 200)}…` : text
}
