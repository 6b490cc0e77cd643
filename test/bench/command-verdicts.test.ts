import { describe, expect, it } from "vitest"
import { type CommandCase, commandTable, commandVerdicts } from "../../bench/ingest-commands.ts"

const run = (target: string, via: CommandCase["via"], p99: number): CommandCase => ({
  target,
  ceiling: !(target === "Postgres" || target === "PGlite"),
  via,
  rate: 1_000,
  sent: 100,
  received: 100,
  errors: 0,
  firstError: undefined,
  p50: p99 / 3,
  p99,
  max: p99 * 2,
  answerP50: Number.NaN,
  answerP99: Number.NaN,
  cpu: { server: 0.1, postgres: 0.05, loadgen: 0.1, machine: 0.3 },
  stalls: undefined
})

/** One round of bench:ingest's command case, in its run order: the peers, then Voltaic on Postgres. */
const round = (scale: number) => [
  run("bare aedes", "forward", 2 * scale),
  run("bare aedes", "http-forward", 4 * scale),
  run("aedes+Postgres", "forward", 4 * scale),
  run("aedes+Postgres", "http-forward", 5 * scale),
  run("Postgres", "http", 7 * scale),
  run("Postgres", "mqtt", 5 * scale)
]

describe("bench:ingest's command verdicts with the REST peers", () => {
  it("judges a REST run against the forwarded publish, and sets it beside the same POST answered by the peers", () => {
    const [rest, mqtt] = commandVerdicts(round(1))
    // The aim is the issue's: ≤ 10 ms and ≤ 3× bare aedes forwarding the MQTT publish (7 / 2 = ×3.50).
    expect(rest).toContain("POST /v1/commands/run at 1,000/s")
    expect(rest).toContain("**not met** (p99 7.0 ms, ×3.50 bare aedes's 2.0 ms")
    expect(rest).toContain("×1.75 aedes+Postgres's 4.0 ms (the durable peer)")
    expect(rest).toContain("×1.75 bare aedes's 4.0 ms answering the same POST")
    expect(rest).toContain("×1.40 aedes+Postgres's 5.0 ms answering the same POST")
    // An MQTT run has no REST peer to be set beside.
    expect(mqtt).toContain("**met** (p99 5.0 ms, ×2.50 bare aedes's 2.0 ms")
    expect(mqtt).not.toContain("answering the same POST")
  })

  it("takes each round's REST peer for that round's ratio, and the medians over rounds", () => {
    const cases = [...round(1), ...round(2), ...round(1.5)]
    const { columns, rows } = commandTable(cases)
    const bare = columns.indexOf("REST p99 vs REST peer")
    const durable = columns.indexOf("REST p99 vs REST aedes+store")
    expect(bare).toBeGreaterThan(0)
    expect(durable).toBe(bare + 1)
    const voltaicRest = rows.filter((r) => r[0] === "Voltaic/Postgres" && r[1] === "POST /v1/commands/run")
    expect(voltaicRest.map((r) => [r[bare], r[durable]])).toEqual([["×1.75", "×1.40"], ["×1.75", "×1.40"], ["×1.75", "×1.40"]])
    // Peers and MQTT runs have no REST ratio.
    expect(rows.filter((r) => !voltaicRest.includes(r)).every((r) => r[bare] === "–" && r[durable] === "–")).toBe(true)
    const [rest] = commandVerdicts(cases)
    expect(rest).toContain("×1.75 bare aedes's 6.0 ms answering the same POST (medians)")
  })

  it("has no REST columns when no peer answered a POST", () => {
    const cases = round(1).filter((c) => c.via !== "http-forward")
    expect(commandTable(cases).columns.some((c) => c.startsWith("REST"))).toBe(false)
    expect(commandVerdicts(cases)[0]).not.toContain("answering the same POST")
  })
})
