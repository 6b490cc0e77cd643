/**
 * bench:ingest's command case (issue 19): commands run on devices at a fixed rate over all the
 * devices, each run's latency measured from its send to its arrival at the device's own
 * subscription on `devices/{id}/commands/{slug}/run` (`bench/commands-load.ts`, one process for
 * senders and devices: one clock).
 *
 * - Voltaic: `POST /v1/commands/run` and the MQTT publish on `devices/{id}/commands/{slug}`, each on
 *   its own, with the application key. A run is stored before it is delivered (group commit).
 * - The peer: a bare broker forwarding the same publish (sent straight on the run topic).
 * - Over REST, a peer of the same sender too (`http-forward`): the broker's process answering the
 *   same `POST /v1/commands/run` with a publish on the run topic (bench/aedes-bare.ts, `PEER_HTTP`),
 *   after its commit on a durable peer: what HTTP itself costs on this machine, beside Voltaic.
 *
 * Aim: p99 ≤ 10 ms and ≤ 3× the peer's p99 in the same run.
 */
import { readFileSync, rmSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import {
  machineCores,
  machineTicks,
  onShutdown,
  parallel,
  percentile,
  postgresCpuSeconds,
  processCpuSeconds,
  STALL_COLUMNS,
  stallCells,
  type Stalls,
  start,
  stop
} from "./harness.ts"
import type { CommandsLoadResult } from "./commands-load.ts"
import { medianOfText, peerInRound, ratiosText, roundOf, summarizeRounds } from "./rounds.ts"

export const COMMAND_SLUG = "bench-ping"
export const COMMAND_AIM = { p99Ms: 10, ofPeer: 3 }

export type CommandVia = "http" | "mqtt" | "forward" | "http-forward"
const VIA_LABEL: Record<CommandVia, string> = {
  http: "POST /v1/commands/run",
  mqtt: "MQTT devices/{id}/commands/{slug}",
  forward: "MQTT on the run topic (forwarded)",
  "http-forward": "POST /v1/commands/run (forwarded)"
}
/** The load's sender: a peer's REST runs are sent as Voltaic's are. */
const senderOf = (via: CommandVia): "http" | "mqtt" | "forward" => (via === "http-forward" ? "http" : via)

export interface CommandCase {
  readonly target: string
  readonly ceiling: boolean
  readonly via: CommandVia
  readonly rate: number
  readonly sent: number
  readonly received: number
  readonly errors: number
  readonly firstError: string | undefined
  readonly p50: number
  readonly p99: number
  readonly max: number
  /** `POST /v1/commands/run`: p50 and p99 of the time to the HTTP answer (NaN for the other senders). */
  readonly answerP50: number
  readonly answerP99: number
  /** Cores used in the measured window: the server process, Postgres (its shared processes and this database's backends), the load process, the machine. */
  readonly cpu: { readonly server: number; readonly postgres: number; readonly loadgen: number; readonly machine: number }
  /** What the stall probe saw in the measured window. */
  readonly stalls: Stalls | undefined
}

/** A command with the bench's slug on every device (one that exists already is kept). */
export const seedCommands = async (httpUrl: string, appKey: string, deviceIds: ReadonlyArray<string>) => {
  await parallel(deviceIds.length, 16, async (i) => {
    const res = await fetch(`${httpUrl}/v1/commands`, {
      method: "POST",
      headers: { authorization: `Bearer ${appKey}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "bench ping", slug: COMMAND_SLUG, device: { id: deviceIds[i] } })
    })
    const text = await res.text()
    if (res.status !== 200 && res.status !== 409) throw new Error(`POST /v1/commands: ${res.status} ${text}`)
  })
}

export const runCommandCase = async (options: {
  readonly root: string
  readonly target: string
  readonly ceiling: boolean
  readonly via: CommandVia
  readonly mqttUrl: string
  readonly httpUrl: string | undefined
  readonly appKey: string
  readonly devices: ReadonlyArray<{ readonly id: string; readonly key: string }>
  readonly rate: number
  readonly warmupMs: number
  readonly durationMs: number
  readonly clientPrefix: string
  /** BENCH_LATENCY_DUMP: where the load writes each run's send time and latency. */
  readonly dumpFile: string | undefined
  /** The server process, for its CPU. */
  readonly serverPid: number | undefined
  /** The Postgres database the server uses, for its CPU; undefined without Postgres. */
  readonly database: string | undefined
  /** The machine's stalls between two epoch times (`startStallProbe`); undefined: not probed. */
  readonly stalls: ((from: number, to: number) => Stalls) | undefined
}): Promise<CommandCase> => {
  const resultFile = join(tmpdir(), `voltaic-commands-${process.pid}-${Date.now()}.json`)
  const load = start("commands load", process.execPath, ["--import", "tsx", "bench/commands-load.ts"], { cwd: options.root, env: process.env })
  const close = onShutdown(() => stop(load))
  try {
    load.process.stdin!.end(JSON.stringify({
      via: senderOf(options.via),
      mqttUrl: options.mqttUrl,
      httpUrl: options.httpUrl,
      appKey: options.appKey,
      devices: options.devices,
      slug: COMMAND_SLUG,
      rate: options.rate,
      warmupMs: options.warmupMs,
      durationMs: options.durationMs,
      clientPrefix: options.clientPrefix,
      resultFile,
      dumpFile: options.dumpFile
    }))
    const budget = options.warmupMs + options.durationMs + 120_000
    const resultLine = load.waitForLine(/^RESULT$/, budget)
    resultLine.catch(() => undefined)
    const reading = () => ({
      at: performance.now(),
      epoch: Date.now(),
      server: processCpuSeconds(options.serverPid),
      postgres: options.database === undefined ? Number.NaN : postgresCpuSeconds(options.database),
      loadgen: processCpuSeconds(load.process.pid),
      machine: machineTicks()
    })
    await load.waitForLine(/^MEASURING$/, budget)
    const before = reading()
    await load.waitForLine(/^SENT$/, budget)
    const after = reading()
    const seconds = (after.at - before.at) / 1000
    const cpu = {
      server: (after.server - before.server) / seconds,
      postgres: (after.postgres - before.postgres) / seconds,
      loadgen: (after.loadgen - before.loadgen) / seconds,
      machine: machineCores(before.machine, after.machine)
    }
    await resultLine
    const result = JSON.parse(readFileSync(resultFile, "utf8")) as CommandsLoadResult
    return {
      target: options.target,
      ceiling: options.ceiling,
      via: options.via,
      rate: options.rate,
      sent: result.sent,
      received: result.received,
      errors: result.errors,
      firstError: result.firstError,
      p50: percentile(result.latencyMs, 50),
      p99: percentile(result.latencyMs, 99),
      max: result.latencyMs.at(-1) ?? Number.NaN,
      answerP50: result.answerMs.length === 0 ? Number.NaN : percentile(result.answerMs, 50),
      answerP99: result.answerMs.length === 0 ? Number.NaN : percentile(result.answerMs, 99),
      cpu,
      stalls: options.stalls?.(before.epoch, after.epoch)
    }
  } finally {
    rmSync(resultFile, { force: true })
    await close()
  }
}

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : "–")
const cores = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : "–")

/**
 * The durable peers' names (bench/aedes-bare.ts with a store: a publish acknowledged and forwarded
 * once committed, by group commit), one per store.
 */
export const DURABLE_PEERS = ["aedes+Postgres", "aedes+PGlite"] as const
/** The durable peer a Voltaic target is compared with: the one on its store. */
export const durablePeerOf = (target: string): string => (target.startsWith("PGlite") ? "aedes+PGlite" : "aedes+Postgres")
const isDurablePeer = (target: string) => (DURABLE_PEERS as ReadonlyArray<string>).includes(target)

type PeerVia = "forward" | "http-forward"
/** A peer's runs by one sender (the first ceiling's, the durable peers apart): one per round. */
const bareRuns = (cases: ReadonlyArray<CommandCase>, via: PeerVia) => {
  const first = cases.find((c) => c.ceiling && c.via === via && !isDurablePeer(c.target))
  return first === undefined ? [] : cases.filter((c) => c.target === first.target && c.via === via)
}
/** The peer's runs: the publish forwarded on the run topic. */
const peerRuns = (cases: ReadonlyArray<CommandCase>) => bareRuns(cases, "forward")
/** The durable peer's runs by one sender for a Voltaic target's, one per round; none when it did not run. */
const durableRuns = (cases: ReadonlyArray<CommandCase>, target: string, via: PeerVia = "forward") =>
  cases.filter((c) => c.ceiling && c.via === via && c.target === durablePeerOf(target))

/** Runs of one target by one sender are rounds of one another. */
const sameRun = (a: CommandCase, b: CommandCase) => a.target === b.target && a.via === b.via

/** A run's peer: the peer's run of the same round, or its only one. */
const inRound = (cases: ReadonlyArray<CommandCase>, runs: ReadonlyArray<CommandCase>, c: CommandCase) => peerInRound(runs, roundOf(cases, c, sameRun))

/** "×1.23": a Voltaic run's p99 over that of its peer's run (one of `runs`) of the same round; "–" for a peer or when none ran. */
const ratioTo = (cases: ReadonlyArray<CommandCase>, c: CommandCase, runs: ReadonlyArray<CommandCase>) => {
  const peer = c.ceiling ? undefined : inRound(cases, runs, c)
  return peer === undefined ? "–" : `×${(c.p99 / peer.p99).toFixed(2)}`
}

export const commandTable = (cases: ReadonlyArray<CommandCase>) => {
  const peers = peerRuns(cases)
  const durable = cases.some((c) => isDurablePeer(c.target))
  const httpPeers = bareRuns(cases, "http-forward")
  const hasHttpPeers = cases.some((c) => c.via === "http-forward")
  const rounds = cases.some((c) => roundOf(cases, c, sameRun) > 0)
  return {
    columns: [
      "target", "sent by", ...(rounds ? ["round"] : []), "runs/s", "sent", "delivered", "errors", "p50 ms", "p99 ms", "max ms",
      `p99 vs ${peers[0]?.target ?? "peer"}`, ...(durable ? ["p99 vs aedes+store"] : []),
      ...(hasHttpPeers ? ["REST p99 vs REST peer", ...(durable ? ["REST p99 vs REST aedes+store"] : [])] : []),
      "server CPU", "Postgres CPU", "loadgen CPU", "machine CPU", ...STALL_COLUMNS
    ],
    numericFrom: 2,
    rows: cases.map((c) => [
      c.ceiling ? c.target : `Voltaic/${c.target}`,
      VIA_LABEL[c.via],
      ...(rounds ? [String(roundOf(cases, c, sameRun) + 1)] : []),
      c.rate.toLocaleString("en-US"),
      c.sent.toLocaleString("en-US"),
      c.received.toLocaleString("en-US"),
      c.errors === 0 ? "0" : `${c.errors} ⚠`,
      ms(c.p50),
      ms(c.p99),
      ms(c.max),
      ratioTo(cases, c, peers),
      ...(durable ? [ratioTo(cases, c, durableRuns(cases, c.target))] : []),
      // Only a REST run has the REST peers to be set beside.
      ...(hasHttpPeers
        ? [httpPeers, ...(durable ? [durableRuns(cases, c.target, "http-forward")] : [])].map((runs) => (c.via === "http" ? ratioTo(cases, c, runs) : "–"))
        : []),
      cores(c.cpu.server),
      cores(c.cpu.postgres),
      cores(c.cpu.loadgen),
      `${cores(c.cpu.machine)}/${cpus().length}`,
      ...stallCells(c.stalls)
    ])
  }
}

/**
 * One verdict per Voltaic target and sender. With rounds (BENCH_ROUNDS, or a repeated target), the
 * median p99 over its runs and the median of each round's ratio to the peer's run of that round.
 */
export const commandVerdicts = (cases: ReadonlyArray<CommandCase>): Array<string> => {
  const peers = peerRuns(cases)
  const restPeers = bareRuns(cases, "http-forward")
  const firsts = cases.filter((c) => !c.ceiling && roundOf(cases, c, sameRun) === 0)
  return firsts.map((first) => {
    const runs = cases.filter((c) => sameRun(c, first))
    const p99s = runs.map((c) => c.p99)
    const vsPeer = summarizeRounds(p99s, peers.map((c) => c.p99))
    const durable = durableRuns(cases, first.target)
    const vsDurable = summarizeRounds(p99s, durable.map((c) => c.p99))
    const sent = runs.reduce((n, c) => n + c.sent, 0)
    const received = runs.reduce((n, c) => n + c.received, 0)
    const errors = runs.reduce((n, c) => n + c.errors, 0)
    const met = received === sent && errors === 0 && vsPeer.ours <= COMMAND_AIM.p99Ms && vsPeer.ratio <= COMMAND_AIM.ofPeer
    // REST runs beside the same POST answered by the peers (not part of the aim: what HTTP costs here).
    const restRuns = first.via !== "http" ? [] : [restPeers, durableRuns(cases, first.target, "http-forward")].filter((r) => r.length > 0)
    const restText = restRuns.map((r) => {
      const vs = summarizeRounds(p99s, r.map((c) => c.p99))
      return `×${vs.ratio.toFixed(2)} ${r[0].target}'s ${ms(vs.theirs)} ms answering the same POST${r.length > 1 ? " (medians)" : ""}; `
    }).join("")
    return `${first.target}, command runs sent by ${VIA_LABEL[first.via]} at ${first.rate.toLocaleString("en-US")}/s, p99 to the device ≤ ${COMMAND_AIM.p99Ms} ms and ≤ ${COMMAND_AIM.ofPeer}× the peer's: ` +
      `**${met ? "met" : "not met"}** (p99 ${ms(vsPeer.ours)} ms${medianOfText(p99s, ms)}` +
      `${peers.length === 0 ? ", no peer in this run" : `, ×${vsPeer.ratio.toFixed(2)} ${peers[0].target}'s ${ms(vsPeer.theirs)} ms${ratiosText(vsPeer.ratios)}`}; ` +
      `${durable.length === 0 ? "" : `×${vsDurable.ratio.toFixed(2)} ${durable[0].target}'s ${ms(vsDurable.theirs)} ms (the durable peer${durable.length > 1 ? "; medians" : ""}); `}` +
      restText +
      `${received.toLocaleString("en-US")} of ${sent.toLocaleString("en-US")} delivered)`
  })
}
