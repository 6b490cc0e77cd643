/** Longest log line about one thing a peer sent; beyond it the line is cut. */
export const MAX_LOG_LINE = 2000

/**
 * What ends a log line or works on the terminal showing it: C0 and C1 controls (a newline, a
 * carriage return, a terminal's escape sequences) and U+2028 / U+2029, the line and paragraph
 * separators, which JavaScript and Node's `readline` (how a log is often read line by line)
 * take as line ends.
 */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g
/** As CONTROLS, but a line feed and a tab are left: a failure's stack spans lines. */
const CONTROLS_BUT_LINES = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/g

const escape = (ch: string) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`

/** `text` with CONTROLS written as `\uXXXX`: inside a JSON string, the same value. */
export const escapeControls = (text: string): string => text.replace(CONTROLS, escape)

/** `text` with CONTROLS but line feeds and tabs written as `\uXXXX`: for a block of lines (a stack). */
export const escapeControlsButLines = (text: string): string => text.replace(CONTROLS_BUT_LINES, escape)

/**
 * A log line that stays one line whatever a peer put in it (an HTTP path is percent-decoded,
 * a CoAP Uri-Path or an MQTT topic or client id is any UTF-8): control characters, a newline
 * forging a second line among them, are escaped, and the line is bounded.
 */
export const printable = (line: string): string => {
  const escaped = escapeControls(line)
  return escaped.length > MAX_LOG_LINE ? `${escaped.slice(0, MAX_LOG_LINE)}…` : escaped
}
