import { describe, expect, it } from "vitest"
import type { Findings } from "../../fuzz/oracle.ts"
import { failed, mustBeZero, type StoreRun } from "../../fuzz/report.ts"
import type { Defect } from "../../fuzz/server.ts"
import { Tally } from "../../fuzz/tally.ts"

const none = { mqtt: 0, coap: 0, rest: 0 }
const clean: Findings = {
  storedFromInvalid: { events: 0 },
  storedFromRefused: 0,
  ackedNotStored: none,
  storedTwice: 0,
  validAcked: none,
  validStored: none,
  storedAnswerLost: 0,
  examples: {},
  invalidRows: []
}

const runWith = (defects: ReadonlyMap<string, Defect>): StoreRun => ({
  store: "postgres",
  seconds: 1,
  cpu: { server: 0, postgres: 0, fuzzer: 0, machineCores: 0 },
  tally: new Tally(10),
  findings: clean,
  deaths: [],
  healthChecks: 1,
  healthFailures: [],
  defects,
  mqttConnects: 0,
  mqttDeliveries: 0,
  coapStrays: new Map(),
  replays: []
})

describe("fuzz report", () => {
  it("passes a run whose figures are all 0", () => {
    expect(failed(runWith(new Map()))).toBe(false)
  })

  it("fails a run whose server log had error lines or lines its logger did not write, counting each", () => {
    const run = runWith(new Map([
      ["a line broken in two", { first: ["ERROR forged"], count: 3 }],
      ["an error", { first: ["[12:00:00.000] ERROR (#1): mqtt publish failed"], count: 2 }]
    ]))
    expect(mustBeZero(run)).toContainEqual(["server log lines that are errors or not the logger's", 5])
    expect(failed(run)).toBe(true)
  })
})
