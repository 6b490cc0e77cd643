import type { Findings } from "./oracle.ts"
import type { Death, Defect } from "./server.ts"
import type { Protocol, Tally } from "./tally.ts"

export interface StoreRun {
  readonly store: string
  readonly seconds: number
  /** CPU seconds used during the run, and the machine's busy cores on average (other work included). */
  readonly cpu: { readonly server: number; readonly postgres: number; readonly fuzzer: number; readonly machineCores: number }
  readonly tally: Tally
  readonly findings: Findings | undefined
  readonly deaths: ReadonlyArray<Death>
  readonly healthChecks: number
  readonly healthFailures: ReadonlyArray<string>
  readonly defects: ReadonlyMap<string, Defect>
  readonly mqttConnects: number
  readonly mqttDeliveries: number
  readonly coapStrays: ReadonlyMap<string, number>
  /** Replayed inputs behind the oracle's findings. */
  readonly replays: ReadonlyArray<{ readonly kind: string; readonly input: string }>
  /** Set when the run stopped early. */
  readonly aborted?: string | undefined
}

const PROTOCOLS: ReadonlyArray<Protocol> = ["mqtt", "coap", "rest"]
const n = (x: number) => x.toLocaleString("en-US")
const cell = (s: string) => s.replaceAll("|", "\\|").replaceAll("\n", " ")

/** The figures that must be 0, with their values. */
export const mustBeZero = (run: StoreRun): Array<readonly [string, number]> => {
  const rows: Array<readonly [string, number]> = [
    ["process deaths", run.deaths.length],
    ["/health checks failed", run.healthFailures.length],
    ["HTTP 5xx (but 503)", run.tally.total("failed", "rest")],
    ["CoAP 5.xx (but 5.03, 5.05)", run.tally.total("failed", "coap")],
    ["MQTT malformed answers", run.tally.total("failed", "mqtt")],
    // An error line is a defect, and a line outside the logger a stack or a line an input broke in two.
    ["server log lines that are errors or not the logger's", [...run.defects.values()].reduce((sum, d) => sum + d.count, 0)]
  ]
  if (run.findings === undefined) return [...rows, ["stored rows not checked (run aborted)", 1]]
  const f = run.findings
  for (const [table, count] of Object.entries(f.storedFromInvalid)) rows.push([`rows stored from known-invalid inputs: ${table}`, count])
  rows.push(["rows stored though their input was refused", f.storedFromRefused])
  for (const p of PROTOCOLS) rows.push([`valid inputs acknowledged but not stored: ${p}`, f.ackedNotStored[p]])
  rows.push(["inputs stored twice", f.storedTwice])
  return rows
}

export const failed = (run: StoreRun) => run.aborted !== undefined || mustBeZero(run).some(([, v]) => v !== 0)

/** The markdown of one store's run (also printed at the end of the run). */
export const storeSection = (run: StoreRun): string => {
  const t = run.tally
  const lines: Array<string> = []
  lines.push(`### ${run.store}`, "")
  lines.push(`${n(t.inputs)} inputs in ${run.seconds.toFixed(0)} s (${n(Math.round(t.inputs / run.seconds))}/s); ` +
    `${n(run.mqttConnects)} MQTT session CONNECTs, ${n(run.mqttDeliveries)} deliveries received${run.aborted === undefined ? "" : `; **stopped early: ${run.aborted}**`}.`, "")
  const perInput = (s: number) => (s / Math.max(t.inputs, 1)) * 1e6
  const c = run.cpu
  // Server and fuzzer are one thread each (Postgres apart); on 2 dedicated cores the run takes at
  // least the busiest thread's CPU time, and at least half of all the CPU time.
  const floor = Math.max(c.server, c.fuzzer, (c.server + c.postgres + c.fuzzer) / 2) / Math.max(t.inputs, 1) * 1e6
  lines.push(`CPU during the run: server ${c.server.toFixed(0)} s (${perInput(c.server).toFixed(0)} µs/input), Postgres ${c.postgres.toFixed(0)} s, ` +
    `fuzzer ${c.fuzzer.toFixed(0)} s (${perInput(c.fuzzer).toFixed(0)} µs/input); the machine was ${c.machineCores.toFixed(2)} of its cores busy on average ` +
    `(other work included). On 2 cores of its own a million inputs would take at least ${(floor).toFixed(0)} s.`, "")
  lines.push("| must be 0 | count |", "| --- | ---: |")
  for (const [what, value] of mustBeZero(run)) lines.push(`| ${what} | ${value === 0 ? "0" : `**${n(value)}** ✗`} |`)
  lines.push("")
  lines.push("| protocol | inputs | valid | known-invalid | odd (mutated, garbage, random) |", "| --- | ---: | ---: | ---: | ---: |")
  for (const p of PROTOCOLS) {
    const of = (marker: string) => [...t.byMarker].filter(([k]) => k.startsWith(`${p}\t${marker}`)).reduce((s, [, v]) => s + v, 0)
    lines.push(`| ${p} | ${n(t.sent[p])} | ${n(of("valid"))} | ${n(of("invalid"))} | ${n(of("odd"))} |`)
  }
  lines.push("")
  lines.push("| protocol | input | answer | count |", "| --- | --- | --- | ---: |")
  for (const p of PROTOCOLS) {
    for (const marker of ["valid", "invalid", "odd"]) {
      const answers = [...t.counts].filter(([k]) => k.startsWith(`${p}\t${marker}`)).sort((a, b) => a[0].split("\t")[1].localeCompare(b[0].split("\t")[1]) || b[1] - a[1])
      for (const [k, v] of answers) lines.push(`| ${p} | ${k.split("\t")[1]} | ${cell(k.split("\t")[2])} | ${n(v)} |`)
    }
  }
  for (const [what, v] of run.coapStrays) lines.push(`| coap | odd | answer matching no request: ${cell(what)} | ${n(v)} |`)
  lines.push("")
  if (run.findings !== undefined) {
    const f = run.findings
    lines.push("| valid tagged inputs | mqtt | coap | rest |", "| --- | ---: | ---: | ---: |")
    lines.push(`| acknowledged (PUBACK / 2.01 / 200) | ${PROTOCOLS.map((p) => n(f.validAcked[p])).join(" | ")} |`)
    lines.push(`| stored | ${PROTOCOLS.map((p) => n(f.validStored[p])).join(" | ")} |`)
    lines.push("", `Stored although the answer was lost (timeout, reset, connection closed): ${n(f.storedAnswerLost)}.`, "")
    if (f.invalidRows.length > 0) {
      lines.push("First rows of the device that only known-invalid inputs aim at:", "")
      for (const row of f.invalidRows) lines.push(`- \`${cell(row.slice(0, 400))}\``)
      lines.push("")
    }
  }
  const invalidKinds = [...t.byMarker].filter(([k]) => k.includes("\tinvalid/")).map(([k, v]) => [k.split("\t")[1].slice("invalid/".length), v] as const)
  const byKind = new Map<string, number>()
  for (const [kind, v] of invalidKinds) byKind.set(kind, (byKind.get(kind) ?? 0) + v)
  lines.push(`Known-invalid inputs by rule: ${[...byKind].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${n(v)}`).join(", ")}.`, "")
  if (run.defects.size > 0) {
    lines.push("Defects in the server log (error lines and anything printed outside the logger), by kind:", "")
    for (const { first, count } of [...run.defects.values()].sort((a, b) => b.count - a.count).slice(0, 15)) {
      lines.push(`- ${n(count)}×:`, "", "  ```", ...first.map((l) => `  ${l.slice(0, 300)}`), "  ```")
    }
    lines.push("")
  }
  // Deaths by the end of their log (times and ids aside): each kind once, with its count.
  const deaths = new Map<string, { first: Death; count: number }>()
  for (const death of run.deaths) {
    const kind = death.tail.slice(-16).map((l) => l.replace(/^\[[^\]]*\]/, "").replace(/\d+/g, "N")).join("\n")
    const seen = deaths.get(kind)
    if (seen === undefined) deaths.set(kind, { first: death, count: 1 })
    else seen.count += 1
  }
  for (const { first, count } of deaths.values()) {
    lines.push(`${count === 1 ? "A death" : `${n(count)} deaths`} (exit code ${first.code}, signal ${first.signal}; the first at ${first.at}) after these log lines:`, "")
    lines.push("```", ...first.tail.slice(-16).map((l) => l.slice(0, 300)), "```", "")
  }
  const samples = [...t.samples, ...run.replays.map((r) => ({ protocol: "", outcome: r.kind, input: r.input }))]
  if (samples.length > 0) {
    lines.push("Inputs behind failures (the first few of each kind):", "")
    for (const s of samples.slice(0, 40)) lines.push(`- ${s.protocol} ${cell(s.outcome)}: \`${cell(s.input.slice(0, 500))}\``)
    lines.push("")
  }
  return lines.join("\n")
}

/** One progress line. */
export const progress = (store: string, t: Tally, total: number, startedAt: number, deaths: number): string => {
  const seconds = (Date.now() - startedAt) / 1000
  const rate = t.inputs / Math.max(seconds, 0.001)
  const left = rate > 0 ? (total - t.inputs) / rate : Number.NaN
  const failures = t.total("failed")
  return `${store}: ${n(t.inputs)}/${n(total)} inputs (mqtt ${n(t.sent.mqtt)}, coap ${n(t.sent.coap)}, rest ${n(t.sent.rest)}) ` +
    `${n(Math.round(rate))}/s, ${seconds.toFixed(0)} s, ~${Number.isNaN(left) ? "?" : left.toFixed(0)} s left; server errors ${n(failures)}, deaths ${deaths}`
}
