/**
 * What the store holds after a run, judged against what each input was and what it was
 * answered. Every tagged input's row carries `stamp(seq)` as its timestamp; known-invalid
 * inputs aim only at the invalid device (and `fzx-` names), so any row of theirs is a refused
 * input that was stored.
 */
import { INVALID_PREFIX, TAG_BASE, type Targets } from "./generators/index.ts"
import type { Protocol, Tally } from "./tally.ts"

export type Query = (statement: string, params: ReadonlyArray<unknown>) => Promise<ReadonlyArray<Record<string, unknown>>>

export interface Findings {
  /** Rows made by known-invalid inputs, per table (must all be 0). */
  readonly storedFromInvalid: Record<string, number>
  /** Valid tagged inputs answered with a refusal or a server error whose row exists anyway (must be 0). */
  readonly storedFromRefused: number
  /** Valid tagged inputs acknowledged (HTTP 2xx, CoAP 2.01, PUBACK) with no row (must be 0). */
  readonly ackedNotStored: Record<Protocol, number>
  /** Tagged inputs stored more than once (must be 0). */
  readonly storedTwice: number
  /** Valid tagged inputs: acknowledged, and stored, per protocol. */
  readonly validAcked: Record<Protocol, number>
  readonly validStored: Record<Protocol, number>
  /** Stored although their answer was lost (timeout, reset, closed): allowed. */
  readonly storedAnswerLost: number
  /** Sequence numbers of the first few inputs behind each finding, to replay them. */
  readonly examples: Record<string, Array<number>>
  /** The first rows of the invalid device, as stored. */
  readonly invalidRows: ReadonlyArray<string>
}

const zero = (): Record<Protocol, number> => ({ mqtt: 0, coap: 0, rest: 0 })

export const judge = async (query: Query, targets: Targets, tally: Tally, count: number): Promise<Findings> => {
  const stored = new Uint8Array(count)
  for (const table of ["events", "locations"]) {
    const rows = await query(
      `SELECT timestamp FROM ${table} WHERE timestamp >= $2 AND timestamp < $3
         AND device_id IN (SELECT id FROM devices WHERE id = $1 OR custom_id LIKE 'fzv-%')`,
      [targets.valid.id, TAG_BASE, TAG_BASE + count]
    )
    for (const row of rows) {
      const seq = Number(row.timestamp) - TAG_BASE
      if (stored[seq] < 255) stored[seq] += 1
    }
  }
  const one = async (statement: string, params: ReadonlyArray<unknown>) => Number((await query(statement, params))[0]?.n ?? 0)
  const x = targets.invalid.id
  const storedFromInvalid: Record<string, number> = {
    events: await one("SELECT count(*) AS n FROM events WHERE device_id = $1", [x]),
    locations: await one("SELECT count(*) AS n FROM locations WHERE device_id = $1", [x]),
    "command runs": await one("SELECT count(*) AS n FROM command_runs WHERE device_id = $1", [x]),
    // The seeded `reboot` command is the only one it may have.
    commands: (await one("SELECT count(*) AS n FROM commands WHERE device_id = $1", [x])) - 1 +
      (await one("SELECT count(*) AS n FROM commands WHERE name LIKE $1", [`${INVALID_PREFIX}%`])),
    devices: await one("SELECT count(*) AS n FROM devices WHERE custom_id LIKE $1 OR name LIKE $1", [`${INVALID_PREFIX}%`]),
    spaces: await one("SELECT count(*) AS n FROM spaces WHERE name LIKE $1", [`${INVALID_PREFIX}%`])
  }
  const invalidRows: Array<string> = []
  // Data cut as text: a stored row may be nested deeper than JSON.stringify can go.
  const columns = { events: "id, name, left(data::text, 300) AS data, timestamp, protocol", locations: "id, latitude, longitude, altitude, timestamp, protocol" }
  for (const [table, list] of Object.entries(columns)) {
    for (const row of await query(`SELECT ${list} FROM ${table} WHERE device_id = $1 ORDER BY timestamp LIMIT 3`, [x])) {
      invalidRows.push(`${table}: ${JSON.stringify(row, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))}`)
    }
  }
  const findings = {
    storedFromInvalid,
    invalidRows,
    storedFromRefused: 0,
    ackedNotStored: zero(),
    storedTwice: 0,
    validAcked: zero(),
    validStored: zero(),
    storedAnswerLost: 0,
    examples: {} as Record<string, Array<number>>
  }

  const example = (kind: string, seq: number) => {
    const list = (findings.examples[kind] ??= [])
    if (list.length < 3) list.push(seq)
  }
  for (const row of invalidRows) {
    const seq = Number(/"timestamp":"?(\d+)/.exec(row)?.[1]) - TAG_BASE
    if (seq >= 0 && seq < count) example("stored from a known-invalid input", seq)
  }
  for (let seq = 0; seq < count; seq++) {
    const protocol = tally.protocol(seq)
    if (protocol === undefined || tally.marker(seq) !== "valid" || tally.taggedOf[seq] === 0) continue
    const verdict = tally.verdict(seq)
    const rows = stored[seq]
    if (rows > 1) {
      findings.storedTwice += 1
      example("stored twice", seq)
    }
    if (rows > 0) findings.validStored[protocol] += 1
    if (verdict === "acked") {
      findings.validAcked[protocol] += 1
      if (rows === 0) {
        findings.ackedNotStored[protocol] += 1
        example(`acknowledged, not stored (${protocol})`, seq)
      }
    } else if ((verdict === "refused" || verdict === "failed") && rows > 0) {
      findings.storedFromRefused += 1
      example("stored though refused", seq)
    } else if (verdict === "lost" && rows > 0) findings.storedAnswerLost += 1
  }
  return findings
}
