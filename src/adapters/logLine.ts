/** Longest log line about one thing a peer sent; beyond it the line is cut. */
export const MAX_LOG_LINE = 2000

/**
 * A log line that stays one line whatever a peer put in it (an HTTP path is percent-decoded,
 * a CoAP Uri-Path or an MQTT topic or client id is any UTF-8): control characters, a newline
 * forging a second line among them, are escaped, and the line is bounded.
 */
export const printable = (line: string): string => {
  const escaped = line.replace(/[\u0000-\u001f\u007f-\u009f]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`)
  return escaped.length > MAX_LOG_LINE ? `${escaped.slice(0, MAX_LOG_LINE)}…` : escaped
}
