import type { CommandRunRow, EventRow } from "./batch.ts"

/**
 * The writer's rows as text for the store: COPY's text format, or one JSON document per batch
 * (a single text parameter, which the server parses instead of this process escaping one array
 * per column, and which PGlite runs prepared: `SqlClient.write`).
 */

const COPY_SPECIAL = /[\\\t\n\r]/
const COPY_ESCAPES: Record<string, string> = { "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r" }
/** Text as a field of COPY's text format: backslash, tab and line ends escaped. */
const copyField = (text: string) => COPY_SPECIAL.test(text) ? text.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c]) : text

/** Events in COPY's text format, in `COPY_EVENTS`'s columns; no data is `\N` (SQL NULL), JSON null is `null`. */
export const eventsCopyText = (events: ReadonlyArray<EventRow>): string => {
  let text = ""
  for (const e of events) {
    text += `${copyField(e.id)}\t${copyField(e.organisationId)}\t${copyField(e.deviceId)}\t${copyField(e.name)}\t${
      e.data === null ? "\\N" : copyField(e.data)
    }\t${e.timestamp}\t${e.receivedAt}\t${copyField(e.protocol)}\n`
  }
  return text
}

/**
 * A row's `data` in a JSON document: already JSON text, it goes in as it is inside a one-element
 * array (read back by `u.data -> 0`), so that JSON null stays a JSON null and no data stays SQL NULL.
 */
const jsonData = (data: string | null) => data === null ? "null" : `[${data}]`

/** Events as a JSON array of records (`INSERT_EVENTS_WITH_SEEN`'s). */
export const eventsDocument = (events: ReadonlyArray<EventRow>): string => {
  const parts: Array<string> = []
  for (const e of events) {
    parts.push(
      `{"id":${JSON.stringify(e.id)},"org":${JSON.stringify(e.organisationId)},"dev":${JSON.stringify(e.deviceId)},"name":${
        JSON.stringify(e.name)
      },"data":${jsonData(e.data)},"ts":${e.timestamp},"rcv":${e.receivedAt},"proto":${JSON.stringify(e.protocol)}}`
    )
  }
  return `[${parts.join(",")}]`
}

/** Command runs as a JSON array of records (`INSERT_RUNS_DOCUMENT`'s). */
export const runsDocument = (runs: ReadonlyArray<CommandRunRow>): string => {
  const parts: Array<string> = []
  for (const r of runs) {
    parts.push(
      `{"id":${JSON.stringify(r.id)},"org":${JSON.stringify(r.organisationId)},"cmd":${JSON.stringify(r.commandId)},"dev":${
        JSON.stringify(r.deviceId)
      },"data":${jsonData(r.data)},"ts":${r.timestamp},"proto":${JSON.stringify(r.protocol)}}`
    )
  }
  return `[${parts.join(",")}]`
}

/** Each device's latest receipt in a batch, as a JSON array of records (the devices' update reads it as `seen`). */
export const seenDocument = (seen: ReadonlyMap<string, number>): string => {
  const parts: Array<string> = []
  for (const [id, at] of seen) parts.push(`{"id":${JSON.stringify(id)},"at":${at}}`)
  return `[${parts.join(",")}]`
}
