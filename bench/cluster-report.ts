/** The figures, tables and verdict of `npm run bench:cluster` (bench/cluster.ts). */
import type { SilentDevice, Handover } from "./cluster-failover.ts"
import { percentile } from "./harness.ts"
import type { Traffic } from "./cluster-load.ts"

export interface CpuRow {
  readonly phase: string
  readonly process: string
  /** Events PUBACKed by this process in the measured window. */
  readonly events: number
  readonly windowS: number
  readonly cpuS: number
  /** Cores busy with no load (measured just before it started). */
  readonly idleCores: number
}

const n = (value: number) => value.toLocaleString("en-US")
const fixed = (value: number | undefined, digits: number) => value === undefined || !Number.isFinite(value) ? "n/a" : value.toFixed(digits)

export const markdownTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) =>
  [
    `| ${header.join(" | ")} |`,
    `| ${header.map((_, i) => (i < 2 ? "---" : "---:")).join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

/**
 * CPU per event per process, gross and net of what the process burns idle (the cluster's polling
 * included), and the ratios of two processes' summed CPU per event to one's.
 */
export const cpuTable = (rows: ReadonlyArray<CpuRow>) => {
  const perEvent = (r: CpuRow) => r.events === 0 ? Number.NaN : r.cpuS / r.events * 1000
  const netPerEvent = (r: CpuRow) => r.events === 0 ? Number.NaN : (r.cpuS - r.idleCores * r.windowS) / r.events * 1000
  const body = rows.map((r) => [
    r.phase,
    r.process,
    n(r.events),
    fixed(r.events / r.windowS, 0),
    fixed(r.cpuS / r.windowS, 3),
    fixed(r.idleCores, 3),
    fixed(perEvent(r), 3),
    fixed(netPerEvent(r), 3)
  ])
  const one = rows.find((r) => r.phase === "one process" && r.process === "A")
  const two = rows.find((r) => r.phase === "two processes" && r.process === "A + B")
  const ratio = (f: (r: CpuRow) => number) => one !== undefined && two !== undefined ? f(two) / f(one) : Number.NaN
  return {
    ratio: ratio(perEvent),
    netRatio: ratio(netPerEvent),
    table: markdownTable(["phase", "process", "events PUBACKed", "events/s", "cores under load", "cores idle", "CPU ms/event", "net of idle, ms/event"], body)
  }
}

export interface SilentResult {
  readonly silent: SilentDevice
  /** devices.last_seen_at: null when the last event was not stored. */
  readonly lastSeenAt: number | null
  readonly alerts: number
  /** An alert's last_seen_at moved past its first_seen_at: raised again for a later deadline. */
  readonly raisedAgain: boolean
  readonly firstCreatedAt: number | null
}

export interface Verdict {
  readonly sent: number
  readonly acked: number
  readonly stored: number
  readonly duplicates: number
  readonly ackedLost: number
  readonly storedUnacked: number
  readonly clientErrors: number
  readonly silentExpected: number
  readonly silentLost: number
  readonly silentDuplicated: number
  readonly lateness: ReadonlyArray<number>
  readonly problems: ReadonlyArray<string>
}


export const judge = (input: {
  readonly traffic: Traffic
  readonly stored: ReadonlyMap<string, number>
  readonly unacked: number
  readonly handover: Handover
  readonly silent: ReadonlyArray<SilentResult>
  readonly afterMs: number
  readonly spurious: number
  readonly survivorHealth: number
}): Verdict => {
  let acked = 0
  let ackedLost = 0
  let storedUnacked = 0
  let clientErrors = 0
  for (const [k, sent] of input.traffic.sent) {
    if (sent.failed !== undefined) clientErrors += 1
    if (sent.ackedAt !== undefined) {
      acked += 1
      if (!input.stored.has(k)) ackedLost += 1
    } else if (input.stored.has(k)) storedUnacked += 1
  }
  let copies = 0
  for (const c of input.stored.values()) copies += c
  const expected = input.silent.filter((s) => s.lastSeenAt !== null)
  const silentLost = expected.filter((s) => s.alerts === 0).length
  const silentDuplicated = input.silent.filter((s) => s.alerts > 1 || s.raisedAgain).length
  const lateness = expected
    .filter((s) => s.firstCreatedAt !== null)
    .map((s) => (s.firstCreatedAt! - (s.lastSeenAt! + input.afterMs)) / 1000)
    .sort((a, b) => a - b)
  const problems: Array<string> = []
  if (ackedLost > 0) problems.push(`${ackedLost} acknowledged events are not stored`)
  if (input.unacked > 0) problems.push(`${input.unacked} publishes were still unacknowledged 30 s after the load stopped`)
  if (input.handover.allOwnedS === undefined) problems.push("the killed process's shards did not all get an owner again")
  if (silentLost > 0) problems.push(`${silentLost} silent devices got no offline alert`)
  if (silentDuplicated > 0) problems.push(`${silentDuplicated} silent devices got more than one offline alert`)
  if (input.spurious > 0) problems.push(`${input.spurious} offline alerts for devices that were publishing`)
  if (expected.length < input.silent.length) problems.push(`${input.silent.length - expected.length} silent devices' last events were not stored`)
  if (input.survivorHealth !== 200) problems.push(`the survivor's /health answered ${input.survivorHealth}`)
  return {
    sent: input.traffic.sent.size,
    acked,
    stored: input.stored.size,
    duplicates: copies - input.stored.size,
    ackedLost,
    storedUnacked,
    clientErrors,
    silentExpected: expected.length,
    silentLost,
    silentDuplicated,
    lateness,
    problems
  }
}

export const shardRows = (shards: { readonly alone: string; readonly joined: string; readonly joinS: number | undefined; readonly handover: Handover }) => [
  ["shards held, one process", shards.alone],
  ["shards held, two processes", `${shards.joined} (split ${fixed(shards.joinS, 1)} s after B listened)`],
  ["shards the killed process held", String(shards.handover.victimShards)],
  ["its locks released after", `${fixed(shards.handover.releasedS, 1)} s`],
  ["survivor took the first after", `${fixed(shards.handover.firstTakenS, 1)} s`],
  ["**every shard has an owner again after**", `**${fixed(shards.handover.allOwnedS, 1)} s**`],
  ["shards held afterwards", shards.handover.ownersAfter]
]

export const trafficRows = (v: Verdict, traffic: Traffic, unacked: number, killedAt: number, victim: string) => {
  const moved = traffic.reconnects.filter((r) => r.at >= killedAt)
  const firstMove = moved.length === 0 ? Number.NaN : (Math.min(...moved.map((r) => r.at)) - killedAt) / 1000
  const lastMove = moved.length === 0 ? Number.NaN : (Math.max(...moved.map((r) => r.at)) - killedAt) / 1000
  return [
    ["events sent (QoS 1)", n(v.sent)],
    ["events PUBACKed", n(v.acked)],
    ["events stored (distinct)", n(v.stored)],
    ["**acknowledged but lost** (must be 0)", `**${n(v.ackedLost)}**`],
    ["stored twice (re-sent after an unanswered publish)", n(v.duplicates)],
    ["stored but never PUBACKed", n(v.storedUnacked)],
    ["unacknowledged 30 s after the load stopped", n(unacked)],
    ["refused by the client library (error callback)", n(v.clientErrors)],
    ["sends skipped: publisher's window full", n(traffic.heldBack)],
    [`connections lost from ${victim} / reconnections after the kill`, `${traffic.closes.filter((c) => c.at >= killedAt && c.from === victim).length} / ${moved.length}`],
    ["reconnected after the kill, first / last", `${fixed(firstMove, 1)} s / ${fixed(lastMove, 1)} s`]
  ]
}

export const silentTable = (results: ReadonlyArray<SilentResult>, killAt: number, afterMs: number) =>
  markdownTable(
    ["device", "last event to", "deadline vs kill (s)", "offline alerts", "lateness (s)"],
    results.map((r, i) => {
      const deadline = r.lastSeenAt === null ? null : r.lastSeenAt + afterMs
      return [
        String(i + 1),
        `${r.silent.via} (${r.silent.status})`,
        deadline === null ? "not stored" : fixed((deadline - killAt) / 1000, 1),
        `${r.alerts}${r.raisedAgain ? " (raised again)" : ""}`,
        deadline === null || r.firstCreatedAt === null ? "none" : fixed((r.firstCreatedAt - deadline) / 1000, 2)
      ]
    })
  )

export const alertRows = (v: Verdict, spurious: number) => [
  ["silent devices (last event stored)", n(v.silentExpected)],
  ["**offline alerts lost** (must be 0)", `**${v.silentLost}**`],
  ["**offline alerts duplicated** (must be 0): more than one, or raised again", `**${v.silentDuplicated}**`],
  ["offline alerts of devices still publishing (must be 0)", String(spurious)],
  ["lateness after the deadline, p50 / max", `${fixed(percentile(v.lateness, 50), 2)} s / ${fixed(v.lateness.at(-1), 2)} s`]
]
