import { lazy, Suspense } from "preact/compat"
import { useEffect, useState } from "preact/hooks"
import { onSessionChange, session, setSession } from "./api.ts"
import { type LiveStatus, liveStatus, onLiveStatus, startLive } from "./live.ts"
import { navigate, usePath } from "./router.ts"
import { ErrorBoundary } from "./ui/ErrorBoundary.tsx"
import { Link } from "./ui/kit.tsx"
import { SignIn } from "./pages/SignIn.tsx"
import { Fleet } from "./pages/Fleet.tsx"

// Pages beyond the fleet load when first opened: the first load carries only what it shows.
const DevicePage = lazy(() => import("./pages/Device.tsx").then((m) => m.DevicePage))
const Energy = lazy(() => import("./pages/Energy.tsx").then((m) => m.Energy))
const Alerts = lazy(() => import("./pages/Alerts.tsx").then((m) => m.Alerts))
const People = lazy(() => import("./pages/People.tsx").then((m) => m.People))

const NAV = [
  ["/", "Fleet"],
  ["/energy", "Energy"],
  ["/alerts", "Alerts"],
  ["/people", "People"]
] as const

const page = (path: string) => {
  const device = /^\/devices\/([^/]+)$/.exec(path)
  if (device !== null) return <DevicePage id={decodeURIComponent(device[1])} />
  if (path === "/" || path === "/fleet") return <Fleet />
  if (path === "/energy") return <Energy />
  if (path === "/alerts") return <Alerts />
  if (path === "/people") return <People />
  return (
    <p class="notice error" role="alert">
      No page at {path}. <Link to="/">Back to the fleet</Link>
    </p>
  )
}

const signOut = async () => {
  const current = session()
  // A user token is revoked; a key stays as it is (it was not made here).
  if (current?.kind === "user") {
    await fetch("/v1/auth/token/revoke", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: current.credential }) }).catch(() => undefined)
  }
  setSession(undefined, "You signed out.")
  navigate("/")
}

export const App = () => {
  const [, setVersion] = useState(0)
  const [status, setStatus] = useState<LiveStatus>(liveStatus())
  const path = usePath()
  const current = session()
  useEffect(() => onSessionChange(() => setVersion((n) => n + 1)), [])
  useEffect(() => onLiveStatus(setStatus), [])
  useEffect(() => (current === undefined ? undefined : startLive()), [current?.credential])

  if (current === undefined) return <SignIn />
  return (
    <div class="shell">
      <header>
        <strong class="brand">⚡ Voltaic</strong>
        <nav>
          {NAV.map(([to, label]) => (
            <Link key={to} to={to} class={(to === "/" ? path === "/" || path.startsWith("/devices") : path.startsWith(to)) ? "active" : ""}>
              {label}
            </Link>
          ))}
        </nav>
        <span class={`live ${status}`} data-testid="live-status" title="Live updates from the server">
          {status === "live" ? "● live" : status === "connecting" ? "○ connecting" : "○ reconnecting"}
        </span>
        <span class="who" data-testid="who">
          {current.who} · {current.organisation.name}
          {current.readOnly ? " · read-only" : ""}
        </span>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main>
        <ErrorBoundary resetKey={path}>
          <Suspense fallback={<p>Loading…</p>}>{page(path)}</Suspense>
        </ErrorBoundary>
      </main>
    </div>
  )
}
