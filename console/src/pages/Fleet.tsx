import { useEffect, useRef, useState } from "preact/hooks"
import { get, post } from "../api.ts"
import { onLive } from "../live.ts"
import type { Device, Space } from "../types.ts"
import { Notice, Secret, canWrite, useAction, useLoad } from "../ui/kit.tsx"
import { DeviceTable } from "./DeviceTable.tsx"

const SpaceForm = ({ onCreated }: { onCreated: () => void }) => {
  const [name, setName] = useState("")
  const action = useAction()
  return (
    <form
      class="inline"
      onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          await post<Space>("/spaces", { name })
          setName("")
          onCreated()
        })
      }}
    >
      <input name="spaceName" placeholder="New space name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
      <button type="submit" disabled={action.busy}>
        Create space
      </button>
      <Notice error={action.error} />
    </form>
  )
}

const DeviceForm = ({ spaces, onCreated }: { spaces: ReadonlyArray<Space>; onCreated: () => void }) => {
  const [name, setName] = useState("")
  const [customId, setCustomId] = useState("")
  const [spaceId, setSpaceId] = useState("")
  const [created, setCreated] = useState<Device>()
  const action = useAction()
  const space = spaceId || spaces[0]?.id || ""
  return (
    <form
      class="inline"
      onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          const device = await post<Device>("/devices", { name, ...(customId === "" ? {} : { customId }), space: { id: space } })
          setCreated(device)
          setName("")
          setCustomId("")
          onCreated()
        })
      }}
    >
      <input name="deviceName" placeholder="New device name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
      <input name="customId" placeholder="customId (optional)" value={customId} onInput={(e) => setCustomId(e.currentTarget.value)} />
      <select name="deviceSpace" value={space} onChange={(e) => setSpaceId(e.currentTarget.value)} required>
        {spaces.length === 0 ? <option value="">create a space first</option> : null}
        {spaces.map((s) => (
          <option key={s.id} value={s.id}>
            {s.name}
          </option>
        ))}
      </select>
      <button type="submit" disabled={action.busy || space === ""}>
        Create device
      </button>
      <Notice error={action.error} />
      {created?.secretKey === undefined ? null : <Secret label={`Secret key of ${created.name} (${created.id})`} value={created.secretKey} />}
    </form>
  )
}

/** Spaces with their live counts, and every device, searchable. */
export const Fleet = () => {
  const spaces = useLoad(() => get<{ spaces: Array<Space> }>("/spaces", { limit: 200, order: "name", sort: "ASC" }).then((r) => r.spaces), [])
  const [devicesRound, setDevicesRound] = useState(0)
  const [spaceFilter, setSpaceFilter] = useState("")
  const reloadSpaces = useRef(spaces.reload)
  reloadSpaces.current = spaces.reload
  // Counts move with alerts and with devices seen: read them again, at most twice a second.
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined
    const off = onLive((message) => {
      if (message.kind !== "alert" && message.kind !== "event") return
      timer ??= setTimeout(() => {
        timer = undefined
        reloadSpaces.current()
      }, message.kind === "alert" ? 100 : 500)
    })
    return () => {
      off()
      if (timer !== undefined) clearTimeout(timer)
    }
  }, [])
  const list = spaces.value ?? []
  return (
    <section>
      <h1>Fleet</h1>
      <Notice error={spaces.error} />
      <h2>Spaces</h2>
      <table class="grid" data-testid="spaces">
        <thead>
          <tr>
            <th>Space</th>
            <th>Online</th>
            <th>Offline</th>
            <th>Open alerts</th>
            <th>Time zone</th>
          </tr>
        </thead>
        <tbody>
          {list.map((s) => (
            <tr key={s.id} data-space={s.id} class={spaceFilter === s.id ? "selected" : ""} onClick={() => setSpaceFilter(spaceFilter === s.id ? "" : s.id)}>
              <td>{s.name}</td>
              <td>{s.live?.devicesOnline ?? "–"}</td>
              <td>{s.live?.devicesOffline ?? "–"}</td>
              <td class="open-alerts">{s.live?.openAlerts ?? "–"}</td>
              <td>{s.timezone ?? "UTC"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {canWrite() ? <SpaceForm onCreated={spaces.reload} /> : null}
      <h2>Devices</h2>
      {canWrite() ? <DeviceForm spaces={list} onCreated={() => setDevicesRound((n) => n + 1)} /> : null}
      <DeviceTable spaces={list} spaceId={spaceFilter} onSpace={setSpaceFilter} round={devicesRound} />
    </section>
  )
}
