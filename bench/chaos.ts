/**
 * `npm run chaos`: faults under a steady QoS 1 load (issue 15, "Faults").
 *
 * Starts the server as a child process on a fresh Postgres database (dropped afterwards) and a
 * private nats-server on a free port (never the shared one), seeds devices over REST, and runs
 * mqtt.js publishers (sequence-numbered QoS 1 events) and one subscriber (bench/chaos-load.ts).
 * Meanwhile it terminates the server's Postgres backends (`pg_terminate_backend`) several times,
 * then SIGKILLs the nats-server several times, keeping it down a few seconds and restarting it
 * on the same port. At the end it counts what was PUBACKed against what is stored.
 *
 * Checks, each a reason to exit 1: no acknowledged event lost; the server logs the loss and the
 * recovery of the dependency exactly once per fault; it recovers alone (same process, /health
 * and /ready answer 200, events published after the last fault are stored and delivered).
 *
 * Prints the tables and appends them to `bench/RESULTS.md`.
 *
 * Settings (environment): CHAOS_PUBLISHERS (4), CHAOS_RATE events/s over all publishers (400),
 * CHAOS_PG_FAULTS (3), CHAOS_NATS_FAULTS (3), CHAOS_NATS_DOWN_MS (3000), CHAOS_GAP_MS between
 * faults (5000), NATS_SERVER_BIN (/usr/sbin/nats-server), BENCH_PG_ADMIN_URL (the server and a
 * database to connect to for CREATE DATABASE; postgres://postgres@127.0.0.1:5432/test),
 * BENCH_NO_RECORD (set: do not append to RESULTS.md).
 */
import { appendFileSync, readFileSync } from "node:fs"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import postgres from "postgres"
import { createRestClient } from "../src/client/index.ts"
import { startPrivateNats } from "../test/support/nats.ts"
import { type Device, EVENT_NAME, key, startPublishers, startSubscriber, type Traffic } from "./chaos-load.ts"
import { createBenchDatabase, gitState, intSetting, machine, onShutdown, runMain, serverNodeFlags, sleep, start, stop, utcDate, voltaicEnv } from "./harness.ts"
import { type Fault, faultRows, judge, type LogLine, markdownTable, summaryRows } from "./chaos-report.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const HOST = "127.0.0.1"
const APP_KEY = "a_sk_chaos_bench_key_0123456789abcdef"

const settings = {
  publishers: intSetting("CHAOS_PUBLISHERS", 4, 1),
  rate: intSetting("CHAOS_RATE", 400, 1),
  pgFaults: intSetting("CHAOS_PG_FAULTS", 3, 0),
  pgOutages: intSetting("CHAOS_PG_OUTAGES", 1, 0),
  pgDownMs: intSetting("CHAOS_PG_DOWN_MS", 3_000, 0),
  natsFaults: intSetting("CHAOS_NATS_FAULTS", 3, 0),
  natsDownMs: intSetting("CHAOS_NATS_DOWN_MS", 3_000, 0),
  gapMs: intSetting("CHAOS_GAP_MS", 5_000, 1_000),
  adminUrl: process.env.BENCH_PG_ADMIN_URL ?? "postgres://postgres@127.0.0.1:5432/test",
  record: process.env.BENCH_NO_RECORD === undefined
}

/** Unacknowledged events per publisher at most; a publisher held back longer skips sends (counted). */
const WINDOW = 2_000
const DRAIN_MS = 30_000

const get = async (url: string) => {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(5_000) })).status
  } catch {
    return 0
  }
}

const main = async (): Promise<number> => {
  const date = utcDate()
  const loadBefore = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")
  const db = await createBenchDatabase(settings.adminUrl, "voltaic_chaos")
  onShutdown(() => db.drop())
  // For what cannot be done from inside the database (ALLOW_CONNECTIONS).
  const admin = postgres(settings.adminUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 })
  onShutdown(() => admin.end({ timeout: 5 }))
  const nats = await startPrivateNats()
  onShutdown(() => nats.kill())

  const logs: Array<LogLine> = []
  const env = { ...voltaicEnv(HOST, APP_KEY, db.url), NATS_URL: nats.url }
  const server = start("voltaic", process.execPath, [...serverNodeFlags, "--import", "tsx", "src/main.ts"], {
    cwd: root,
    env,
    onLine: (line) => logs.push({ at: Date.now(), line })
  })
  onShutdown(() => stop(server, 15_000))
  const listening = (what: string) => server.waitForLine(new RegExp(`${what} listening on [\\d.]+:(\\d+)`), 120_000).then((m) => Number(m[1]))
  const [httpPort, mqttPort] = await Promise.all([listening("http"), listening("mqtt")])
  const httpUrl = `http://${HOST}:${httpPort}`
  const mqttUrl = `mqtt://${HOST}:${mqttPort}`

  const rest = createRestClient({ baseUrl: `${httpUrl}/v1`, key: APP_KEY })
  const space = await rest.spaces.create({ name: "Chaos" })
  const devices: Array<Device> = []
  for (let i = 0; i < settings.publishers; i++) {
    const device = await rest.devices.create({ name: `chaos-${i}`, space: { id: space.id } })
    devices.push({ id: device.id, secretKey: device.secretKey })
  }

  const traffic: Traffic = { sent: new Map(), delivered: new Map(), closes: [], heldBack: 0 }
  const subscriber = await startSubscriber(mqttUrl, APP_KEY, devices, traffic)
  const publishers = await startPublishers(mqttUrl, devices, settings.rate, WINDOW, traffic)
  console.log(`chaos: ${settings.publishers} publishers at ${settings.rate} events/s in total; warming up`)
  await sleep(3_000)
  // Opens the connection that terminates the others (it spares itself).
  await db.query("SELECT 1")

  const faults: Array<Fault> = []
  for (let i = 0; i < settings.pgFaults; i++) {
    const at = Date.now()
    const [{ n }] = await db.query<{ n: number }>(
      "SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    console.log(`chaos: Postgres fault ${i + 1}: terminated ${n} backends`)
    await sleep(settings.gapMs)
    faults.push({ kind: "postgres", index: i + 1, at, restoredAt: at, detail: `${n} backend${n === 1 ? "" : "s"} terminated`, until: Date.now() })
  }
  // An outage of the database alone: new connections refused for a while (the Postgres
  // service itself, shared with other work, is never stopped).
  for (let i = 0; i < settings.pgOutages; i++) {
    const at = Date.now()
    await admin.unsafe(`ALTER DATABASE ${db.name} ALLOW_CONNECTIONS false`)
    const [{ n }] = await admin<Array<{ n: number }>>`SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = ${db.name}`
    await sleep(Math.min(1_000, settings.pgDownMs))
    const readyDuring = await get(`${httpUrl}/ready`)
    await sleep(settings.pgDownMs - Math.min(1_000, settings.pgDownMs))
    await admin.unsafe(`ALTER DATABASE ${db.name} ALLOW_CONNECTIONS true`)
    const restoredAt = Date.now()
    console.log(`chaos: Postgres outage ${i + 1}: ${n} backends terminated, connections refused for ${restoredAt - at} ms, /ready answered ${readyDuring} meanwhile`)
    await sleep(settings.gapMs)
    faults.push({
      kind: "postgres",
      index: settings.pgFaults + i + 1,
      at,
      restoredAt,
      detail: `${n} backend${n === 1 ? "" : "s"} terminated, connections refused ${((restoredAt - at) / 1000).toFixed(1)} s; /ready ${readyDuring} during`,
      until: Date.now()
    })
  }
  for (let i = 0; i < settings.natsFaults; i++) {
    const at = Date.now()
    await nats.kill()
    await sleep(Math.min(1_000, settings.natsDownMs))
    const readyDuring = await get(`${httpUrl}/ready`)
    await sleep(settings.natsDownMs - Math.min(1_000, settings.natsDownMs))
    await nats.restart()
    const restoredAt = Date.now()
    console.log(`chaos: NATS fault ${i + 1}: down ${restoredAt - at} ms, /ready answered ${readyDuring} meanwhile`)
    await sleep(settings.gapMs)
    faults.push({ kind: "nats", index: i + 1, at, restoredAt, detail: `down ${((restoredAt - at) / 1000).toFixed(1)} s; /ready ${readyDuring} during`, until: Date.now() })
  }

  const unacked = await publishers.stop(DRAIN_MS)
  // Deliveries of the last acknowledgements are on their way.
  await sleep(1_000)
  await subscriber.close()
  const health = await get(`${httpUrl}/health`)
  const ready = await get(`${httpUrl}/ready`)
  const alive = server.process.exitCode === null && server.process.signalCode === null

  const stored = new Map<string, number>()
  for (const row of await db.query<{ p: number; s: number }>(
    "SELECT (data->>'p')::int AS p, (data->>'s')::int AS s FROM events WHERE name = $1",
    [EVENT_NAME]
  )) stored.set(key(row.p, row.s), (stored.get(key(row.p, row.s)) ?? 0) + 1)

  const rows = faultRows(faults, traffic, logs)
  const verdict = judge({ traffic, stored, faults: rows, health, ready, alive, unacked })
  const faultTable = markdownTable(
    ["fault", "what", "lost line", "reconnected line", "server: outage", "first PUBACK after", "first delivery after", "PUBACKs > 1 s", "max PUBACK ms", "connections closed", "not-stored refusals"],
    rows.map((r) => r.cells)
  )
  const summaryTable = markdownTable(["measure", "value"], summaryRows(verdict))
  console.log(`\n${faultTable}\n\n${summaryTable}\n`)
  // The server's own account of the faults.
  for (const l of logs) if (/store: |bus: |not stored|WARN|ERROR/.test(l.line)) console.log(`server: ${l.line}`)
  for (const problem of verdict.problems) console.error(`chaos: FAILED: ${problem}`)
  if (settings.record) {
    appendFileSync(resolve(root, "bench/RESULTS.md"), `
## Chaos (npm run chaos): ${date}

\`npm run chaos\` (bench/chaos.ts). Machine: ${machine()}; Postgres on the same machine, sharing its cores; load average
${loadBefore} when the run started (other work shares this machine).

- Server: \`src/main.ts\` (${gitState(root, ["src", "bench"])}) as a child process on a fresh Postgres database and a
  private nats-server (core NATS, no JetStream).
- Load: ${settings.publishers} mqtt.js publishers (one device each) at ${settings.rate} QoS 1 events/s in total, at most ${WINDOW}
  unacknowledged each; one mqtt.js subscriber (application key) to every device's events.
- Faults, ${settings.gapMs / 1000} s apart: ${settings.pgFaults} × \`pg_terminate_backend\` of every backend of the database; ${settings.pgOutages} × the database
  closed to new connections (\`ALLOW_CONNECTIONS false\`) and its backends terminated, reopened after ${settings.pgDownMs / 1000} s;
  ${settings.natsFaults} × SIGKILL of the nats-server, restarted on the same port after ${settings.natsDownMs / 1000} s.
- "first PUBACK after" / "first delivery after": from the fault (terminated backends), the reopening (closed database)
  or the restart (NATS) to the first PUBACK / first delivery of an event published after it. "PUBACKs > 1 s": events
  sent between 1 s before the fault and the next fault whose PUBACK took longer than 1 s. "server: outage" is the server's own \`reconnected … after\`.
  Deliveries are at most once (core NATS): those of events acknowledged while NATS was down are not expected.

${faultTable}

${summaryTable}

Verdict: **${verdict.problems.length === 0 ? "passed" : `failed: ${verdict.problems.join("; ")}`}**
`)
  }
  return verdict.problems.length === 0 ? 0 : 1
}

runMain("chaos", 10 * 60_000, main)
