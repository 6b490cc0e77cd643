import { useState } from "preact/hooks"
import { del, get, post } from "../api.ts"
import type { OrganisationUser, Space, Team } from "../types.ts"
import { Notice, isAdmin, useAction, useLoad } from "../ui/kit.tsx"

const UserForm = ({ onCreated }: { onCreated: () => void }) => {
  const [emailAddress, setEmail] = useState("")
  const [fullName, setName] = useState("")
  const [password, setPassword] = useState("")
  const action = useAction()
  return (
    <form class="inline" onSubmit={(e) => {
      e.preventDefault()
      void action.run(async () => {
        await post("/organisations/users/", { emailAddress, fullName, ...(password === "" ? {} : { password }) })
        setEmail("")
        setName("")
        setPassword("")
        onCreated()
      })
    }}>
      <input name="userEmail" type="email" placeholder="e-mail" required value={emailAddress} onInput={(e) => setEmail(e.currentTarget.value)} />
      <input name="userName" placeholder="full name" required value={fullName} onInput={(e) => setName(e.currentTarget.value)} />
      <input name="userPassword" type="password" placeholder="password (8+)" value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
      <button type="submit" disabled={action.busy}>Add user</button>
      <Notice error={action.error} />
    </form>
  )
}

/** A picker of users not yet in `taken`, with an add button. */
const AddUser = ({ users, taken, label, onAdd }: { users: ReadonlyArray<OrganisationUser>; taken: ReadonlyArray<string>; label: string; onAdd: (id: string) => void }) => {
  const [chosen, setChosen] = useState("")
  const free = users.filter((u) => !taken.includes(u.id))
  if (free.length === 0) return null
  return (
    <span class="inline">
      <select value={chosen} onChange={(e) => setChosen(e.currentTarget.value)} aria-label={label}>
        <option value="">{label}…</option>
        {free.map((u) => <option key={u.id} value={u.id}>{u.fullName} ({u.emailAddress})</option>)}
      </select>
      <button type="button" disabled={chosen === ""} onClick={() => {
        onAdd(chosen)
        setChosen("")
      }}>Add</button>
    </span>
  )
}

/** Organisation users, teams and their members, and who receives each space's alerts. */
export const People = () => {
  const [round, setRound] = useState(0)
  const again = () => setRound((n) => n + 1)
  const users = useLoad(() => get<Array<OrganisationUser>>("/organisations/users", { limit: 200, order: "createdAt", sort: "ASC" }), [round])
  const teams = useLoad(() => get<Array<Team>>("/teams/", { limit: 200 }), [round])
  const spaces = useLoad(() => get<{ spaces: Array<Space> }>("/spaces", { limit: 200 }).then((r) => r.spaces), [round])
  const [teamName, setTeamName] = useState("")
  const action = useAction()
  const all = users.value ?? []
  const change = (work: () => Promise<unknown>) => void action.run(async () => {
    await work()
    again()
  })
  const admin = isAdmin()
  return (
    <section>
      <h1>People</h1>
      {admin ? null : <Notice error="Users and teams are managed by an organisation admin or a writable application key; this credential may only look." kind="info" />}
      <Notice error={users.error ?? teams.error ?? spaces.error ?? action.error} />
      <h2>Users</h2>
      <table class="grid" data-testid="users">
        <thead><tr><th>Name</th><th>E-mail</th><th>Admin</th><th>Teams</th></tr></thead>
        <tbody>
          {all.map((u) => (
            <tr key={u.id}>
              <td>{u.fullName}</td>
              <td>{u.emailAddress}</td>
              <td>{u.isAdmin ? "yes" : "no"}</td>
              <td>{u.teams.map((t) => t.name).join(", ")}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {admin ? <UserForm onCreated={again} /> : null}
      <h2>Teams</h2>
      {(teams.value ?? []).map((team) => (
        <div class="card" key={team.id} data-team={team.id}>
          <h3>{team.name}</h3>
          <ul>
            {team.members.map((m) => (
              <li key={m.id}>
                {m.fullName ?? m.id} {m.emailAddress === undefined ? "" : `(${m.emailAddress})`}{" "}
                {admin ? <button type="button" onClick={() => change(() => del(`/teams/${team.id}/members/${m.id}`))}>Remove</button> : null}
              </li>
            ))}
          </ul>
          {admin ? <AddUser users={all} taken={team.members.map((m) => m.id)} label="Add a member" onAdd={(id) => change(() => post(`/teams/${team.id}/members`, { organisationUserId: id }))} /> : null}
        </div>
      ))}
      {admin ? (
        <form class="inline" onSubmit={(e) => {
          e.preventDefault()
          change(async () => {
            const me = await get<{ organisation: { id: string } }>("/whoami")
            await post("/teams/", { organisationId: me.organisation.id, name: teamName })
            setTeamName("")
          })
        }}>
          <input name="teamName" placeholder="New team name" required value={teamName} onInput={(e) => setTeamName(e.currentTarget.value)} />
          <button type="submit">Create team</button>
        </form>
      ) : null}
      <h2>Who receives each space's alerts</h2>
      {(spaces.value ?? []).map((space) => (
        <div class="card" key={space.id} data-space-recipients={space.id}>
          <h3>{space.name}</h3>
          <ul>
            {(space.alertUsers ?? []).length === 0 ? <li class="muted">nobody</li> : null}
            {(space.alertUsers ?? []).map((u) => (
              <li key={u.id}>
                {u.fullName} ({u.emailAddress}){" "}
                {admin ? <button type="button" onClick={() => change(() => del(`/spaces/${space.id}/alerts/users/${u.id}`))}>Remove</button> : null}
              </li>
            ))}
          </ul>
          {admin ? <AddUser users={all} taken={(space.alertUsers ?? []).map((u) => u.id)} label="Add a recipient" onAdd={(id) => change(() => post(`/spaces/${space.id}/alerts/users/${id}`))} /> : null}
        </div>
      ))}
    </section>
  )
}
