import { useEffect, useState } from "preact/hooks"

/** Client-side routes on the History API; the server answers index.html for any of them. */
const listeners = new Set<() => void>()

export const navigate = (to: string): void => {
  if (to === location.pathname + location.search) return
  history.pushState(null, "", to)
  for (const listener of listeners) listener()
}

addEventListener("popstate", () => {
  for (const listener of listeners) listener()
})

export const usePath = (): string => {
  const [path, setPath] = useState(location.pathname)
  useEffect(() => {
    const update = () => setPath(location.pathname)
    listeners.add(update)
    return () => void listeners.delete(update)
  }, [])
  return path
}

/** A link that changes the route without a reload (a modified click still opens a tab). */
export const follow = (event: MouseEvent, to: string): void => {
  if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return
  event.preventDefault()
  navigate(to)
}
