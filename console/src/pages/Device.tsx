import { useEffect, useState } from "preact/hooks"
import { call, get, post } from "../api.ts"
import { type LiveMessage, onLive } from "../live.ts"
import type { Command, Device, DeviceEvent, DeviceLocation } from "../types.ts"
import { ago, json, when } from "../ui/format.ts"
import { Link, Notice, Pager, Secret, canWrite, useAction, useLoad } from "../ui/kit.tsx"
import { AlertTable } from "./AlertTable.tsx"

const HISTORY = 20

/** The live state in words: `unwatched` means no offline rule applies, so it is never called offline. */
const stateText = (device: Device): string => {
  switch (device.live?.state) {
    case "online":
      return "online"
    case "offline":
      return "offline"
    case "unwatched":
      return device.lastSeenAt === null ? "never seen (no offline rule applies)" : "seen (no offline rule applies)"
    default:
      return "never seen"
  }
}

/** A paged history (events or locations) of one device. */
const History = <T extends { id: string; timestamp: number },>({ path, deviceId, plural, columns, round }: {
  path: string
  deviceId: string
  plural: string
  columns: ReadonlyArray<[string, (item: T) => string]>
  round: number
}) => {
  const [page, setPage] = useState(0)
  const list = useLoad(() => call<Record<string, Array<T>>>("GET", path, { query: { "device.id": deviceId, limit: HISTORY, page } }), [path, deviceId, page, round])
  const items = list.value?.data[plural] ?? []
  return (
    <div>
      <Notice error={list.error} />
      <table class="grid" data-testid={`${plural}-history`}>
        <thead>
          <tr>
            {columns.map(([label]) => <th key={label}>{label}</th>)}
          </tr>
        </thead>
        <tbody>
          {items.map((item) => (
            <tr key={item.id}>
              {columns.map(([label, cell]) => <td key={label}>{cell(item)}</td>)}
            </tr>
          ))}
        </tbody>
      </table>
      <Pager page={page} size={HISTORY} total={list.value?.total} onPage={setPage} />
    </div>
  )
}

const Commands = ({ deviceId }: { deviceId: string }) => {
  const list = useLoad(() => get<{ commands: Array<Command> }>("/commands", { "device.id": deviceId, limit: 200 }).then((r) => r.commands), [deviceId])
  const [name, setName] = useState("")
  const [ran, setRan] = useState<string>()
  const action = useAction()
  return (
    <div>
      <Notice error={list.error ?? action.error} />
      {ran === undefined ? null : <Notice error={ran} kind="info" />}
      <ul class="commands">
        {(list.value ?? []).map((command) => (
          <li key={command.id}>
            <code>{command.slug}</code> {command.name}{" "}
            {canWrite() ? (
              <button type="button" disabled={action.busy} onClick={() => void action.run(async () => {
                await post("/commands/run", { slug: command.slug, device: { id: deviceId } })
                setRan(`Ran ${command.slug} at ${new Date().toLocaleTimeString()}`)
              })}>
                Run
              </button>
            ) : null}
          </li>
        ))}
      </ul>
      {canWrite() ? (
        <form class="inline" onSubmit={(e) => {
          e.preventDefault()
          void action.run(async () => {
            await post("/commands", { name, device: { id: deviceId } })
            setName("")
            list.reload()
          })
        }}>
          <input name="commandName" placeholder="New command name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
          <button type="submit">Add command</button>
        </form>
      ) : null}
    </div>
  )
}

/** One device: live stream, histories, commands and open alerts. */
export const DevicePage = ({ id }: { id: string }) => {
  const device = useLoad(() => get<Device>(`/devices/${encodeURIComponent(id)}`), [id])
  const [stream, setStream] = useState<Array<LiveMessage>>([])
  const [round, setRound] = useState(0)
  const [secret, setSecret] = useState<string>()
  const action = useAction()
  useEffect(() => {
    setStream([])
    return onLive((message) => {
      if (message.deviceId !== id) return
      setStream((old) => [message, ...old].slice(0, 100))
      if (message.kind === "alert") setRound((n) => n + 1)
      if (message.kind === "event" || message.kind === "location") device.reload()
    })
  }, [id])
  const d = device.value
  // The sections wait for the device: one that is not there (or not ours) is one message, not one per section.
  if (d === undefined) {
    return (
      <section>
        <p><Link to="/">← Fleet</Link></p>
        {device.error === undefined ? <p>Loading…</p> : <Notice error={device.error} />}
      </section>
    )
  }
  return (
    <section>
      <p><Link to="/">← Fleet</Link></p>
      <Notice error={device.error ?? action.error} />
      <h1>{d.name}</h1>
      <dl class="facts">
        <dt>id</dt><dd><code>{d.id}</code></dd>
        <dt>customId</dt><dd>{d.customId ?? "–"}</dd>
        <dt>state</dt><dd data-testid="device-state">{stateText(d)}</dd>
        <dt>last seen</dt><dd>{when(d.lastSeenAt)} ({ago(d.lastSeenAt)})</dd>
        <dt>space</dt><dd>{d.space?.name ?? "–"}</dd>
        <dt>product</dt><dd>{d.product?.name ?? "–"}</dd>
        <dt>place</dt><dd>{d.place?.id ?? "–"}</dd>
      </dl>
      <p><Link to={`/energy?device.id=${encodeURIComponent(d.id)}`}>Energy of this device</Link></p>
      {canWrite() ? (
        <button type="button" onClick={() => void action.run(async () => {
          if (!confirm(`Rotate the secret key of ${d.name}? The old key stops working at once.`)) return
          setSecret((await post<{ secretKey: string }>(`/devices/${encodeURIComponent(d.id)}/secretKey`)).secretKey)
        })}>
          Rotate secret key
        </button>
      ) : null}
      {secret === undefined ? null : <Secret label="New secret key" value={secret} />}
      <h2>Live</h2>
      <ol class="stream" data-testid="live-stream">
        {stream.length === 0 ? <li class="muted">Waiting for the device…</li> : null}
        {stream.map((m, i) => (
          <li key={`${stream.length - i}`} data-kind={m.kind}>
            <span class="kind">{m.kind}</span> {typeof m.resource.name === "string" ? <b>{m.resource.name}</b> : null}{" "}
            <code>{json(m.kind === "event" ? m.resource.data : m.resource)}</code>{" "}
            <span class="muted">{typeof m.resource.timestamp === "number" ? new Date(m.resource.timestamp).toLocaleTimeString() : ""}</span>
          </li>
        ))}
      </ol>
      <h2>Open alerts</h2>
      <AlertTable query={{ "device.id": id, unresolved: true }} round={round} compact />
      <h2>Commands</h2>
      <Commands deviceId={id} />
      <h2>Events</h2>
      <History<DeviceEvent> path="/events" deviceId={id} plural="events" round={round + stream.length} columns={[
        ["time", (e) => when(e.timestamp)],
        ["name", (e) => e.name],
        ["data", (e) => json(e.data)]
      ]} />
      <h2>Locations</h2>
      <History<DeviceLocation> path="/locations" deviceId={id} plural="locations" round={round + stream.length} columns={[
        ["time", (l) => when(l.timestamp)],
        ["latitude", (l) => l.latitude],
        ["longitude", (l) => l.longitude],
        ["altitude", (l) => l.altitude ?? ""]
      ]} />
    </section>
  )
}
