/** The figures and the verdict of `npm run chaos` (bench/chaos.ts) from what the load and the server's log recorded. */
import type { Traffic } from "./chaos-load.ts"

export interface LogLine {
  readonly at: number
  readonly line: string
}

export interface Fault {
  readonly kind: "postgres" | "nats"
  readonly index: number
  /** When the fault began (backends terminated, nats-server killed). */
  readonly at: number
  /** When the dependency was back (Postgres: at once; NATS: restarted). */
  readonly restoredAt: number
  readonly detail: string
  /** The end of its window (the next fault's start). */
  readonly until: number
}

const LINES = {
  postgres: { lost: /store: lost the connection to Postgres \(/, restored: /store: reconnected to Postgres after ([\d.]+) s/ },
  nats: { lost: /bus: lost NATS \(/, restored: /bus: reconnected to NATS after ([\d.]+) s/ }
} as const

export interface FaultRow {
  readonly fault: Fault
  readonly lostLines: number
  readonly restoredLines: number
  readonly cells: ReadonlyArray<string>
}

const ms = (value: number | undefined) => value === undefined || !Number.isFinite(value) ? "none" : `${Math.round(value).toLocaleString("en-US")}`

export const faultRows = (faults: ReadonlyArray<Fault>, traffic: Traffic, logs: ReadonlyArray<LogLine>): Array<FaultRow> =>
  faults.map((fault) => {
    const lines = logs.filter((l) => l.at >= fault.at && l.at < fault.until)
    const pattern = LINES[fault.kind]
    const lost = lines.filter((l) => pattern.lost.test(l.line))
    const restored = lines.map((l) => pattern.restored.exec(l.line)).filter((m) => m !== null)
    let firstAck = Infinity
    let firstDelivery = Infinity
    let slow = 0
    let maxAck = 0
    for (const [k, sent] of traffic.sent) {
      if (sent.sentAt >= fault.restoredAt && sent.ackedAt !== undefined) firstAck = Math.min(firstAck, sent.ackedAt - fault.restoredAt)
      const delivered = traffic.delivered.get(k)
      if (sent.sentAt >= fault.restoredAt && delivered !== undefined) firstDelivery = Math.min(firstDelivery, delivered - fault.restoredAt)
      if (sent.sentAt < fault.at - 1_000 || sent.sentAt >= fault.until) continue
      const took = (sent.ackedAt ?? Infinity) - sent.sentAt
      if (took > 1_000) slow += 1
      if (sent.sentAt >= fault.at) maxAck = Math.max(maxAck, took)
    }
    const closes = traffic.closes.filter((t) => t >= fault.at && t < fault.until).length
    const refusals = lines.filter((l) => /mqtt publish .* not stored/.test(l.line)).length
    return {
      fault,
      lostLines: lost.length,
      restoredLines: restored.length,
      cells: [
        `${fault.kind === "postgres" ? "Postgres" : "NATS"} ${fault.index}`,
        fault.detail,
        String(lost.length),
        String(restored.length),
        restored.length > 0 ? `${restored.map((m) => m[1]).join(", ")} s` : "none",
        `${ms(firstAck)} ms`,
        `${ms(firstDelivery)} ms`,
        String(slow),
        ms(maxAck),
        String(closes),
        String(refusals)
      ]
    }
  })

export interface Verdict {
  readonly sent: number
  readonly acked: number
  readonly clientErrors: number
  readonly unacked: number
  readonly heldBack: number
  readonly stored: number
  readonly duplicates: number
  readonly ackedLost: number
  readonly storedUnacked: number
  readonly ackedUndelivered: number
  readonly afterLast: { sent: number; stored: number; delivered: number }
  readonly alive: boolean
  readonly health: number
  readonly ready: number
  readonly problems: ReadonlyArray<string>
}

export const judge = (input: {
  readonly traffic: Traffic
  readonly stored: ReadonlyMap<string, number>
  readonly faults: ReadonlyArray<FaultRow>
  readonly health: number
  readonly ready: number
  readonly alive: boolean
  readonly unacked: number
}): Verdict => {
  const { traffic, stored } = input
  let acked = 0
  let clientErrors = 0
  let ackedLost = 0
  let storedUnacked = 0
  let ackedUndelivered = 0
  const afterLast = { sent: 0, stored: 0, delivered: 0 }
  const last = input.faults.at(-1)?.fault
  const recoveredBy = last === undefined ? 0 : last.restoredAt + 2_000
  for (const [k, sent] of traffic.sent) {
    if (sent.failed !== undefined) clientErrors += 1
    if (sent.ackedAt !== undefined) {
      acked += 1
      if (!stored.has(k)) ackedLost += 1
      if (!traffic.delivered.has(k)) ackedUndelivered += 1
    } else if (stored.has(k)) storedUnacked += 1
    if (sent.sentAt >= recoveredBy) {
      afterLast.sent += 1
      if (stored.has(k)) afterLast.stored += 1
      if (traffic.delivered.has(k)) afterLast.delivered += 1
    }
  }
  let copies = 0
  for (const n of stored.values()) copies += n
  const problems: Array<string> = []
  if (ackedLost > 0) problems.push(`${ackedLost} acknowledged events are not stored`)
  for (const row of input.faults) {
    const name = `${row.fault.kind} fault ${row.fault.index}`
    if (row.lostLines !== 1) problems.push(`${name}: ${row.lostLines} loss lines instead of 1`)
    if (row.restoredLines !== 1) problems.push(`${name}: ${row.restoredLines} recovery lines instead of 1`)
  }
  if (!input.alive) problems.push("the server process exited")
  if (input.health !== 200) problems.push(`/health answered ${input.health}`)
  if (input.ready !== 200) problems.push(`/ready answered ${input.ready}`)
  if (input.unacked > 0) problems.push(`${input.unacked} publishes were still unacknowledged 30 s after the load stopped`)
  if (afterLast.sent === 0 || afterLast.stored < afterLast.sent - input.unacked) problems.push("events published after the last fault were not all stored")
  if (afterLast.delivered === 0) problems.push("no event published after the last fault was delivered")
  return {
    sent: traffic.sent.size,
    acked,
    clientErrors,
    unacked: input.unacked,
    heldBack: traffic.heldBack,
    stored: stored.size,
    duplicates: copies - stored.size,
    ackedLost,
    storedUnacked,
    ackedUndelivered,
    afterLast,
    alive: input.alive,
    health: input.health,
    ready: input.ready,
    problems
  }
}

const n = (value: number) => value.toLocaleString("en-US")

export const summaryRows = (v: Verdict): Array<Array<string>> => [
  ["events sent (QoS 1)", n(v.sent)],
  ["events PUBACKed", n(v.acked)],
  ["events stored (distinct)", n(v.stored)],
  ["**acknowledged but lost** (must be 0)", `**${n(v.ackedLost)}**`],
  ["stored twice (re-sent after an unanswered publish)", n(v.duplicates)],
  ["stored but never PUBACKed", n(v.storedUnacked)],
  ["unacknowledged 30 s after the load stopped", n(v.unacked)],
  ["refused by the client library (error callback)", n(v.clientErrors)],
  ["sends skipped: publisher's window full", n(v.heldBack)],
  ["PUBACKed, not delivered to the subscriber", n(v.ackedUndelivered)],
  ["after the last fault: sent / stored / delivered", `${n(v.afterLast.sent)} / ${n(v.afterLast.stored)} / ${n(v.afterLast.delivered)}`],
  ["recovered alone: same process, /health, /ready", `${v.alive ? "yes" : "no"}, ${v.health}, ${v.ready}`]
]

export const markdownTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) =>
  [
    `| ${header.join(" | ")} |`,
    `| ${header.map((_, i) => (i < 2 ? "---" : "---:")).join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")
