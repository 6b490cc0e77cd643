import { useState } from "preact/hooks"
import { type Session, call, post, sessionEndReason, setSession } from "../api.ts"
import { Notice, useAction } from "../ui/kit.tsx"

interface Whoami {
  readonly id: string
  readonly kind: "app" | "device" | "user" | "management"
  readonly scope: string
  readonly organisation: { readonly id: string; readonly name: string }
  readonly user?: { readonly emailAddress: string; readonly isAdmin: boolean }
}

/** Who a credential is, as the console keeps it. */
const sessionFor = async (credential: string): Promise<Session> => {
  const { data: me } = await call<Whoami>("GET", "/whoami", { credential })
  if (me.kind === "user") {
    return { credential, kind: "user", readOnly: false, admin: me.user?.isAdmin === true, who: me.user?.emailAddress ?? me.id, organisation: me.organisation }
  }
  if (me.kind === "app") {
    const readOnly = me.scope === "read"
    return { credential, kind: "app", readOnly, admin: !readOnly, who: `application key ${me.id}`, organisation: me.organisation }
  }
  throw new Error("a device key or management token cannot open the console; use the owner's e-mail and password or an application key")
}

export const SignIn = () => {
  const [mode, setMode] = useState<"password" | "key">("password")
  const [email, setEmail] = useState("")
  const [password, setPassword] = useState("")
  const [key, setKey] = useState("")
  const action = useAction()
  const ended = sessionEndReason()

  const submit = (event: Event) => {
    event.preventDefault()
    void action.run(async () => {
      const credential = mode === "password"
        ? (await post<{ accessToken: string }>("/auth/signIn", { emailAddress: email, password })).accessToken
        : key.trim()
      setSession(await sessionFor(credential))
    })
  }

  return (
    <form class="signin" onSubmit={submit}>
      <h1>⚡ Voltaic console</h1>
      {ended === undefined ? null : <Notice error={ended} kind="info" />}
      <div class="tabs">
        <button type="button" class={mode === "password" ? "active" : ""} onClick={() => setMode("password")}>
          E-mail and password
        </button>
        <button type="button" class={mode === "key" ? "active" : ""} onClick={() => setMode("key")}>
          Application key
        </button>
      </div>
      {mode === "password" ? (
        <>
          <label>
            E-mail <input name="email" type="email" autocomplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
          </label>
          <label>
            Password <input name="password" type="password" autocomplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
          </label>
        </>
      ) : (
        <label>
          Application key <input name="key" type="password" placeholder="a_sk_…" required value={key} onInput={(e) => setKey(e.currentTarget.value)} />
        </label>
      )}
      <Notice error={action.error} />
      <button type="submit" disabled={action.busy}>
        Sign in
      </button>
    </form>
  )
}
