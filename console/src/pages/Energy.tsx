import { lazy, Suspense } from "preact/compat"
import { useMemo, useState } from "preact/hooks"
import { get } from "../api.ts"
import type { Device, Space } from "../types.ts"
import { Notice, useLoad } from "../ui/kit.tsx"
import { toCsv } from "./energyCsv.ts"

const Chart = lazy(() => import("./Chart.tsx").then((m) => m.Chart))

type Kind = "electricity" | "gas" | "water"
type Reading = Record<string, string | number>
interface Envelope {
  readonly result: Array<Reading>
  readonly continuationToken: string | null
  readonly devices?: Record<string, Array<Reading>>
  readonly countries?: Record<string, Array<Reading>>
}

const FIELD: Record<Kind, string> = { electricity: "energy", gas: "gas", water: "water" }
const UNIT: Record<Kind, string> = { electricity: "kWh", gas: "m³", water: "m³" }
const PERIODS = ["hour", "day", "week", "month", "year"] as const
const UNITS = ["minute", "hour", "day", "week", "month"] as const
/** Pages followed for one chart: a year of hours is 9 pages of 1,000 buckets. */
const MAX_PAGES = 20

const zones = (): ReadonlyArray<string> => {
  try {
    return Intl.supportedValuesOf("timeZone")
  } catch {
    return ["UTC"]
  }
}

/** Every page of one query, followed through its continuation tokens. */
const fetchAll = async (kind: Kind, query: Record<string, string | undefined>): Promise<Envelope> => {
  const all: Envelope = { result: [], continuationToken: null, devices: undefined, countries: undefined }
  let token: string | undefined
  let merged = all
  for (let page = 0; page < MAX_PAGES; page++) {
    const answer = await get<Envelope>(`/energy/${kind}`, { ...query, continuationToken: token })
    const join = (a: Record<string, Array<Reading>> | undefined, b: Record<string, Array<Reading>> | undefined) => {
      if (b === undefined) return a
      const out = { ...(a ?? {}) }
      for (const [key, readings] of Object.entries(b)) out[key] = [...(out[key] ?? []), ...readings]
      return out
    }
    merged = { result: [...merged.result, ...answer.result], continuationToken: answer.continuationToken, devices: join(merged.devices, answer.devices), countries: join(merged.countries, answer.countries) }
    if (answer.continuationToken === null) break
    token = answer.continuationToken
  }
  return merged
}

/** Electricity, gas and water of a space, a device or the organisation, with the interface's controls. */
export const Energy = () => {
  const [kind, setKind] = useState<Kind>("electricity")
  const opened = new URLSearchParams(location.search)
  const [spaceId, setSpaceId] = useState(opened.get("space.id") ?? "")
  // Typed or picked: the picker offers devices whose name or customId holds what is typed.
  const [deviceText, setDeviceText] = useState(opened.get("device.id") ?? "")
  const deviceId = /^dev_\S+$/.test(deviceText.trim()) ? deviceText.trim() : ""
  const devices = useLoad(
    () => (deviceText.trim() === "" || deviceId !== "" ? Promise.resolve([]) : get<Array<Device>>("/devices", { search: deviceText.trim(), limit: 20 })),
    [deviceText]
  )
  const [every, setEvery] = useState("1")
  const [unit, setUnit] = useState<(typeof UNITS)[number]>("hour")
  const [timezone, setTimezone] = useState("")
  const [breakdown, setBreakdown] = useState<"" | "device" | "country">("")
  const [period, setPeriod] = useState<"range" | "current" | "previous">("current")
  const [periodUnit, setPeriodUnit] = useState<(typeof PERIODS)[number]>("day")
  const [since, setSince] = useState("")
  const [until, setUntil] = useState("")
  const spaces = useLoad(() => get<{ spaces: Array<Space> }>("/spaces", { limit: 200 }).then((r) => r.spaces), [])

  const query: Record<string, string | undefined> = {
    "space.id": deviceId === "" ? spaceId || undefined : undefined,
    "device.id": deviceId.trim() || undefined,
    interval: `${every} ${unit}`,
    timezone: timezone || undefined,
    breakdown: breakdown || undefined,
    current: period === "current" ? periodUnit : undefined,
    previous: period === "previous" ? periodUnit : undefined,
    since: period === "range" && since !== "" ? new Date(since).toISOString() : undefined,
    until: period === "range" && until !== "" ? new Date(until).toISOString() : undefined
  }
  const key = JSON.stringify([kind, query])
  const data = useLoad(() => fetchAll(kind, query), [key])
  const shownZone = timezone || spaces.value?.find((s) => s.id === spaceId)?.timezone || "UTC"

  const chart = useMemo(() => {
    const envelope = data.value
    if (envelope === undefined) return undefined
    const field = FIELD[kind]
    const groups = envelope.devices ?? envelope.countries
    const timestamps = envelope.result.map((r) => Number(r.timestamp))
    const series = groups === undefined
      ? [{ label: `${kind} (${UNIT[kind]})`, values: envelope.result.map((r) => Number(r[field])) }]
      : Object.entries(groups).map(([label, readings]) => {
        const byTime = new Map(readings.map((r) => [Number(r.timestamp), Number(r[field])]))
        return { label, values: timestamps.map((t) => byTime.get(t) ?? null) }
      })
    return { timestamps, series }
  }, [data.value, kind])

  const download = () => {
    if (chart === undefined) return
    const blob = new Blob([toCsv(chart.timestamps, chart.series)], { type: "text/csv" })
    const link = document.createElement("a")
    link.href = URL.createObjectURL(blob)
    link.download = `voltaic-${kind}-${new Date().toISOString().slice(0, 10)}.csv`
    link.click()
    setTimeout(() => URL.revokeObjectURL(link.href), 1000)
  }

  return (
    <section>
      <h1>Energy</h1>
      <div class="controls">
        <label>Kind
          <select name="kind" value={kind} onChange={(e) => setKind(e.currentTarget.value as Kind)}>
            <option value="electricity">electricity (kWh)</option>
            <option value="gas">gas (m³)</option>
            <option value="water">water (m³)</option>
          </select>
        </label>
        <label>Space
          <select name="space" value={spaceId} onChange={(e) => setSpaceId(e.currentTarget.value)}>
            <option value="">whole organisation</option>
            {(spaces.value ?? []).map((s) => <option key={s.id} value={s.id}>{s.name}</option>)}
          </select>
        </label>
        <label>or device
          <input name="device" list="devices" placeholder="name, customId or dev_…" value={deviceText} onInput={(e) => setDeviceText(e.currentTarget.value)} />
          <datalist id="devices">{(devices.value ?? []).map((d) => <option key={d.id} value={d.id}>{d.name}{d.customId === null ? "" : ` (${d.customId})`}</option>)}</datalist>
        </label>
        <label>Interval
          <input name="every" type="number" min="1" value={every} onChange={(e) => setEvery(e.currentTarget.value || "1")} class="short" />
          <select name="unit" value={unit} onChange={(e) => setUnit(e.currentTarget.value as typeof unit)}>
            {UNITS.map((u) => <option key={u} value={u}>{u}</option>)}
          </select>
        </label>
        <label>Time zone
          <input name="timezone" list="zones" placeholder="the space's" value={timezone} onChange={(e) => setTimezone(e.currentTarget.value)} />
          <datalist id="zones">{zones().map((z) => <option key={z} value={z} />)}</datalist>
        </label>
        <label>Breakdown
          <select name="breakdown" value={breakdown} onChange={(e) => setBreakdown(e.currentTarget.value as typeof breakdown)}>
            <option value="">none</option>
            <option value="device">by device</option>
            <option value="country">by country</option>
          </select>
        </label>
        <label>Period
          <select name="period" value={period} onChange={(e) => setPeriod(e.currentTarget.value as typeof period)}>
            <option value="current">current</option>
            <option value="previous">previous</option>
            <option value="range">from … to …</option>
          </select>
          {period === "range" ? (
            <>
              <input name="since" type="datetime-local" value={since} onChange={(e) => setSince(e.currentTarget.value)} />
              <input name="until" type="datetime-local" value={until} onChange={(e) => setUntil(e.currentTarget.value)} />
            </>
          ) : (
            <select name="periodUnit" value={periodUnit} onChange={(e) => setPeriodUnit(e.currentTarget.value as typeof periodUnit)}>
              {PERIODS.map((p) => <option key={p} value={p}>{p}</option>)}
            </select>
          )}
        </label>
        <button type="button" onClick={download} disabled={chart === undefined || chart.timestamps.length === 0}>Download CSV</button>
      </div>
      <Notice error={data.error} />
      {data.loading ? <p class="muted">Loading…</p> : null}
      {chart === undefined ? null : chart.timestamps.length === 0 ? (
        <p class="muted" data-testid="energy-empty">No readings in this period.</p>
      ) : (
        <Suspense fallback={<p>Loading the chart…</p>}>
          <Chart timestamps={chart.timestamps} series={chart.series} unit={UNIT[kind]} timezone={shownZone} />
        </Suspense>
      )}
    </section>
  )
}
