import { monitorEventLoopDelay } from "node:perf_hooks"
import { Context, Metric } from "effect"
import { PrometheusMetrics } from "effect/observability"

/**
 * What `GET /metrics` shows (issue 17), recorded with Effect's `Metric` and rendered in
 * Prometheus's text format by `effect/observability`'s `PrometheusMetrics`.
 *
 * Every series is recorded in the default `MetricRegistry` (a `Context.Reference`: one registry
 * per process unless a context provides another), from hot paths that run outside any fiber
 * (the ingest fast path, the writer, the MQTT and CoAP callbacks): `updateUnsafe` with the empty
 * context below costs a map lookup. A metric with labels is one `Metric` per label set, made
 * once and found again by its values (`family`): `Metric.withAttributes` would merge and
 * stringify its attributes on every update.
 *
 * Values only known when asked (connections open, actors hosted, the event loop's delay) are
 * read at the scrape (`Metric.registerUnsafe`), from whatever registered itself in `live`.
 * `METRICS=off` turns recording into a flag check, for bench:ingest's comparison.
 */
const registry = Context.empty()

let recording = true

/** Whether metrics are recorded (`METRICS`, default on); set once by the HTTP layer at start. */
export const setRecording = (on: boolean) => {
  recording = on
}

type Labels = Readonly<Record<string, string>>

/**
 * One metric per label set, made on first use and found again by the labels' values: a caller
 * passes the values (`eventsIngested("mqtt", "stored")`), with no object built per update.
 */
const family = <M extends Metric.Metric<number, unknown>>(names: ReadonlyArray<string>, make: (attributes: Labels) => M) => {
  const made = new Map<string, M>()
  return (...values: ReadonlyArray<string>): M => {
    const key = values.join("\u0000")
    let metric = made.get(key)
    if (metric === undefined) {
      metric = make(Object.fromEntries(names.map((name, i) => [name, values[i]])))
      made.set(key, metric)
    }
    return metric
  }
}

const add = (metric: Metric.Metric<number, unknown>, value = 1) => {
  if (recording) metric.updateUnsafe(value, registry)
}

const counter = (name: string, description: string, labels: ReadonlyArray<string> = []) =>
  family(labels, (attributes) => Metric.counter(name, { description, attributes, incremental: true }))

const histogram = (name: string, description: string, boundaries: ReadonlyArray<number>, labels: ReadonlyArray<string> = []) =>
  family(labels, (attributes) => Metric.histogram(name, { description, attributes, boundaries }))

const SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

// Ingest ---------------------------------------------------------------------------------

export type IngestOutcome = "stored" | "refused" | "unavailable" | "failed"

const eventsIngested = counter(
  "voltaic_events_ingested_total",
  "Events received, by protocol and outcome: stored, refused (the client's fault: invalid, unknown device, forbidden, too large), unavailable (the store was behind), failed (the store failed)",
  ["protocol", "outcome"]
)

export const countEvent = (protocol: string, outcome: IngestOutcome) => add(eventsIngested(protocol, outcome))

/** The outcome an ingest failure counts as. */
export const ingestOutcomeOf = (error: { readonly _tag: string }): IngestOutcome =>
  error._tag === "Unavailable" ? "unavailable" : error._tag === "SqlError" ? "failed" : "refused"

// The writer -----------------------------------------------------------------------------

const batchRows = histogram(
  "voltaic_writer_batch_rows",
  "Rows per batch the writer commits (group commit)",
  [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
)()
const commitSeconds = histogram("voltaic_writer_commit_seconds", "Time from a batch's start to its commit (or failure)", SECONDS)()

export const observeBatch = (rows: number) => add(batchRows, rows)
export const observeCommit = (seconds: number) => add(commitSeconds, seconds)

const maintenanceSeconds = histogram(
  "voltaic_store_maintenance_seconds",
  "PGlite's own VACUUM, ANALYZE and CHECKPOINT statements, by action (it has no autovacuum and no checkpointer), timed from the request to the answer (the statement, and any wait behind the one in progress); each holds the embedded store's other statements while it runs",
  SECONDS,
  ["action"]
)

export const observeMaintenance = (action: "vacuum" | "analyze" | "checkpoint", seconds: number) => add(maintenanceSeconds(action), seconds)

// HTTP -----------------------------------------------------------------------------------

const httpDuration = histogram(
  "voltaic_http_request_duration_seconds",
  "HTTP requests by method, route (as registered, `/v1/devices/:id`) and status, until the answer's headers",
  SECONDS,
  ["method", "route", "status"]
)

export const observeHttp = (method: string, route: string, status: number, seconds: number) =>
  add(httpDuration(method, route, String(status)), seconds)

// MQTT, CoAP, the bus -------------------------------------------------------------------

const coapDatagrams = counter("voltaic_coap_datagrams_total", "CoAP datagrams received, sent, and dropped unanswered", ["direction"])
const coapReceived = coapDatagrams("received")
const coapSent = coapDatagrams("sent")
const coapDropped = coapDatagrams("dropped")

export const countCoapReceived = () => add(coapReceived)
export const countCoapSent = () => add(coapSent)
export const countCoapDropped = () => add(coapDropped)

const busPublishes = counter("voltaic_bus_publishes_total", "Messages this process published on its bus: deliveries to subscribers, and control notices", ["kind"])
const busDeliveries = busPublishes("delivery")
const busControls = busPublishes("control")

export const countBusDelivery = () => add(busDeliveries)
export const countBusControl = () => add(busControls)

// Actors, alerts, notifications --------------------------------------------------------

const actorsActivated = counter("voltaic_device_actors_activated_total", "Device actors brought into memory (restored or new)")()
const actorsPassivated = counter("voltaic_device_actors_passivated_total", "Device actors that left memory: idle, deleted, or their bucket stopped here")()

export const countActivated = (n = 1) => add(actorsActivated, n)
export const countPassivated = (n = 1) => add(actorsPassivated, n)

const alertsRaised = counter("voltaic_alerts_raised_total", "Alerts opened (offline, threshold and anomaly rules)")()
export const countAlertsRaised = (n: number) => add(alertsRaised, n)

const notifications = counter("voltaic_notifications_total", "Alert notifications by channel and outcome: delivered, logged (no SMTP_URL), failed", ["channel", "outcome"])
export const countNotification = (channel: string, outcome: string) => add(notifications(channel, outcome))

// Read at the scrape ----------------------------------------------------------------------

/** Sources of the values read at the scrape; each adds itself while it runs. */
export const live = {
  /** MQTT brokers of this process: their open connections and those connections' subscriptions. */
  mqtt: new Set<{ connections(): number; subscriptions(): number }>(),
  /** Device hosts (one per bucket held here): their device actors. */
  deviceHosts: new Set<{ readonly devices: { readonly size: number } }>()
}

const sum = <A>(items: Iterable<A>, f: (a: A) => number) => {
  let total = 0
  for (const item of items) total += f(item)
  return total
}

const pulled = (name: string, description: string, read: () => number) => {
  const gauge = Metric.gauge(name, { description })
  Metric.registerUnsafe(gauge, registry, { get: () => ({ value: read() }), update: () => undefined, modify: () => undefined })
}

/**
 * The event loop's delay, sampled every 10 ms by Node (`monitorEventLoopDelay`) and read at the
 * scrape over the time since the previous one (then reset, as prom-client does). Absent where
 * the runtime has no such monitor.
 */
const loopDelay = (() => {
  try {
    const monitor = monitorEventLoopDelay({ resolution: 10 })
    monitor.enable()
    return monitor
  } catch {
    return undefined
  }
})()

let registered = false

/** Registers the values read at the scrape, once per process. */
const registerPulled = () => {
  if (registered) return
  registered = true
  pulled("voltaic_mqtt_connections", "Open MQTT connections (TCP, TLS and WebSocket)", () => sum(live.mqtt, (b) => b.connections()))
  pulled("voltaic_mqtt_subscriptions", "Subscriptions of the open MQTT connections", () => sum(live.mqtt, (b) => b.subscriptions()))
  pulled("voltaic_device_actors_hosted", "Device actors in memory in this process", () => sum(live.deviceHosts, (h) => h.devices.size))
  if (loopDelay !== undefined) {
    pulled("voltaic_event_loop_delay_p50_seconds", "Median delay of the event loop since the previous scrape", () => loopWindow.p50)
    pulled("voltaic_event_loop_delay_p99_seconds", "99th percentile of the event loop's delay since the previous scrape", () => loopWindow.p99)
    pulled("voltaic_event_loop_delay_max_seconds", "Longest delay of the event loop since the previous scrape", () => loopWindow.max)
  }
}

/** The event loop's delay over the window the current scrape ends (read once, for all three gauges). */
let loopWindow = { p50: 0, p99: 0, max: 0 }

/**
 * Effect cluster's own gauges (`effect/cluster/ClusterMetrics`) come without a description,
 * which `promtool check metrics` reports; the scrape gives them one.
 */
const CLUSTER_HELP: Readonly<Record<string, string>> = {
  effect_cluster_entities: "Entities of each type held by this runner (Effect cluster)",
  effect_cluster_entity_mailbox_size: "Messages waiting in each entity's mailbox (Effect cluster)",
  effect_cluster_entity_mailbox_size_max: "Largest mailbox among the entities of each type (Effect cluster)",
  effect_cluster_singletons: "Singletons running on this runner (Effect cluster)",
  effect_cluster_runners: "Runners this runner knows of (Effect cluster)",
  effect_cluster_runners_healthy: "Runners this runner knows of that are healthy (Effect cluster)",
  effect_cluster_shards: "Shards held by this runner (Effect cluster)",
  effect_cluster_shards_releasing: "Shards this runner is releasing (Effect cluster)"
}

const withHelp = (text: string) =>
  text.replace(/^# TYPE (\S+) /gm, (line, name: string) => {
    const help = CLUSTER_HELP[name] ?? (name.startsWith("effect_") ? `${name} (Effect runtime)` : undefined)
    return help === undefined || text.includes(`# HELP ${name} `) ? line : `# HELP ${name} ${help}\n${line}`
  })

/** The scrape: every metric of this process in Prometheus's text exposition format. */
export const scrape = (): string => {
  registerPulled()
  if (loopDelay !== undefined) {
    const seconds = (nanos: number) => nanos / 1e9
    loopWindow = { p50: seconds(loopDelay.percentile(50)), p99: seconds(loopDelay.percentile(99)), max: seconds(loopDelay.max) }
    loopDelay.reset()
  }
  return withHelp(PrometheusMetrics.formatUnsafe(registry))
}
