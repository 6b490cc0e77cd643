import { useCallback, useEffect, useRef, useState } from "preact/hooks"
import { call, get } from "../api.ts"
import { onLive } from "../live.ts"
import { navigate } from "../router.ts"
import type { Device, Space } from "../types.ts"
import { ago } from "../ui/format.ts"
import { Notice } from "../ui/kit.tsx"
import { VirtualList } from "../ui/VirtualList.tsx"

/** Rows fetched per request (the interface's largest page). */
const PAGE = 200
const ROW_HEIGHT = 34

const stateOf = (device: Device): string => {
  const state = device.live?.state ?? "unknown"
  if (state === "online") return "online"
  if (state === "offline") return "offline"
  if (state === "unwatched") return device.lastSeenAt === null ? "never seen" : "seen"
  return "never seen"
}

/**
 * Every device of the organisation (or of a space), in a virtualised list paged from the server
 * as it scrolls: 10,000 devices cost the rows in view. A publish moves its row at once.
 */
export const DeviceTable = ({ spaces, spaceId, onSpace, round }: { spaces: ReadonlyArray<Space>; spaceId: string; onSpace: (id: string) => void; round: number }) => {
  const [search, setSearch] = useState("")
  const [applied, setApplied] = useState("")
  const [total, setTotal] = useState<number>()
  const [rows, setRows] = useState<Map<number, Device>>(new Map())
  const [error, setError] = useState<unknown>()
  const requested = useRef(new Set<number>())
  const generation = useRef(0)

  // Search as one types, a moment after the last key.
  useEffect(() => {
    const timer = setTimeout(() => setApplied(search.trim()), 250)
    return () => clearTimeout(timer)
  }, [search])

  const fetchPage = useCallback(async (page: number, gen: number) => {
    try {
      const answer = await call<Array<Device>>("GET", "/devices", {
        query: { limit: PAGE, page, order: "createdAt", sort: "DESC", search: applied, "space.id": spaceId }
      })
      if (gen !== generation.current) return
      setTotal(answer.total ?? answer.data.length)
      setRows((old) => {
        const next = new Map(old)
        answer.data.forEach((device, i) => next.set(page * PAGE + i, device))
        return next
      })
    } catch (e) {
      if (gen === generation.current) setError(e)
      requested.current.delete(page)
    }
  }, [applied, spaceId])

  useEffect(() => {
    generation.current++
    requested.current = new Set([0])
    setRows(new Map())
    setTotal(undefined)
    setError(undefined)
    void fetchPage(0, generation.current)
  }, [fetchPage, round])

  // Pages are asked for where the scroll comes to rest (80 ms without a move): a fast scroll
  // through the fleet asks for the pages it stops on, not for every page it passes.
  const settle = useRef<ReturnType<typeof setTimeout>>(undefined)
  useEffect(() => () => clearTimeout(settle.current), [])
  const onRange = useCallback((first: number, last: number) => {
    clearTimeout(settle.current)
    settle.current = setTimeout(() => {
      for (let page = Math.floor(first / PAGE); page <= Math.floor(Math.max(first, last - 1) / PAGE); page++) {
        if (requested.current.has(page)) continue
        requested.current.add(page)
        void fetchPage(page, generation.current)
      }
    }, 80)
  }, [fetchPage])

  // A delivery for a listed device: seen now, then its live fields as its owner has them.
  const shown = useRef(rows)
  const refreshing = useRef(new Set<string>())
  shown.current = rows
  useEffect(() => onLive((message) => {
    if (message.kind === "command") return
    let index: number | undefined
    for (const [i, device] of shown.current) if (device.id === message.deviceId) index = i
    if (index === undefined) return
    const at = index
    const timestamp = typeof message.resource.timestamp === "number" ? message.resource.timestamp : Date.now()
    const replace = (update: (device: Device) => Device) =>
      setRows((current) => {
        const device = current.get(at)
        if (device?.id !== message.deviceId) return current
        const next = new Map(current)
        next.set(at, update(device))
        return next
      })
    const state = shown.current.get(at)?.live?.state
    // An alert (the device went offline, say) changes what its owner says, not when it was seen.
    if (message.kind !== "alert") {
      replace((device) => ({ ...device, lastSeenAt: timestamp, live: { isOnline: true, state: state === "unwatched" ? "unwatched" : "online", lastSeenAt: timestamp } }))
    }
    // The owner is asked only when its answer may differ (a first sign of life, back from
    // offline, an alert), once at a time per device: a busy fleet's events cost no requests.
    if ((message.kind === "alert" || (state !== "online" && state !== "unwatched")) && !refreshing.current.has(message.deviceId)) {
      refreshing.current.add(message.deviceId)
      get<Device>(`/devices/${encodeURIComponent(message.deviceId)}`).then((fresh) => replace(() => fresh), () => undefined)
        .finally(() => refreshing.current.delete(message.deviceId))
    }
  }), [])

  const [now, setNow] = useState(Date.now())
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 5000)
    return () => clearInterval(timer)
  }, [])

  return (
    <div class="devices">
      <div class="inline">
        <input type="search" name="search" placeholder="Search name or customId" value={search} onInput={(e) => setSearch(e.currentTarget.value)} />
        <select name="spaceFilter" value={spaceId} onChange={(e) => onSpace(e.currentTarget.value)}>
          <option value="">All spaces</option>
          {spaces.map((s) => (
            <option key={s.id} value={s.id}>
              {s.name}
            </option>
          ))}
        </select>
        <span data-testid="device-count">{total === undefined ? "…" : `${total} devices`}</span>
      </div>
      <Notice error={error} />
      <div class="vhead">
        <span>Name</span>
        <span>customId</span>
        <span>State</span>
        <span>Last seen</span>
        <span>Product</span>
        <span>Space · place</span>
      </div>
      <VirtualList
        count={total ?? 0}
        rowHeight={ROW_HEIGHT}
        height={Math.min(560, Math.max(ROW_HEIGHT * 3, (total ?? 0) * ROW_HEIGHT))}
        onRange={onRange}
        row={(i) => {
          const device = rows.get(i)
          if (device === undefined) return <span class="loading">…</span>
          const state = stateOf(device)
          return (
            <a class="device-row" href={`/devices/${device.id}`} data-device={device.id} onClick={(e) => { e.preventDefault(); navigate(`/devices/${device.id}`) }}>
              <span>{device.name}</span>
              <span>{device.customId ?? ""}</span>
              <span class={`state ${state.replace(" ", "-")}`}>{state}</span>
              <span class="last-seen" data-last-seen={device.lastSeenAt ?? ""}>{ago(device.lastSeenAt, now)}</span>
              <span>{device.product?.name ?? ""}</span>
              <span>
                {device.space?.name ?? ""}
                {device.place === null ? "" : ` · ${device.place.id}`}
              </span>
            </a>
          )
        }}
      />
    </div>
  )
}
