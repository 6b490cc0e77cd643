/** RFC 7252 §4.8.2 EXCHANGE_LIFETIME (247 s): how long a copy of a message may still arrive. */
export const EXCHANGE_LIFETIME_MS = 247_000

/**
 * Exchanges remembered at most. Beyond this the oldest are forgotten early, and a copy of
 * one of them arriving later would be processed again. Retransmissions come within
 * MAX_TRANSMIT_SPAN (45 s, §4.8.2): 50 000 covers that up to ~1 100 requests/s, and the
 * whole EXCHANGE_LIFETIME up to ~200 requests/s. Each holds its answer (at most ~1.1 KB,
 * a 2.01 typically a few hundred bytes).
 */
export const MAX_EXCHANGES = 50_000

/** A message seen from one endpoint (RFC 7252 §4.5). */
export interface Exchange {
  /**
   * The last ACK or Non-confirmable datagram sent for it: the piggybacked response, the
   * empty ACK of a separate one, or the NON response. Every copy gets this again; while it
   * is undefined the message is still being worked out and its answer is yet to come.
   */
  readonly answer: Uint8Array | undefined
}

export interface Exchanges {
  /** The exchange a message with this key belongs to, when one was opened within the lifetime: the message is a copy. */
  find(key: string, now: number): Exchange | undefined
  /** Remembers a new message for the lifetime from `now`. */
  open(key: string, now: number): void
  /** Records the datagram sent in answer to an open exchange; nothing for an unknown key. */
  answered(key: string, datagram: Uint8Array): void
  readonly size: () => number
}

/**
 * Message deduplication (RFC 7252 §4.5): a request is processed once, and every copy of it
 * (same endpoint and message ID) gets the answer the first one got, or nothing while that
 * answer is still being worked out. The coap package keys its reply cache by token too and
 * fills it only once it has sent something; this covers copies with another token and those
 * arriving while the first is still being stored.
 */
export const makeExchanges = (lifetimeMs = EXCHANGE_LIFETIME_MS, max = MAX_EXCHANGES): Exchanges => {
  // Map order is insertion order and every entry lives as long, so the oldest come first.
  const entries = new Map<string, { answer: Uint8Array | undefined; readonly until: number }>()
  const prune = (now: number) => {
    for (const [key, entry] of entries) {
      if (entry.until > now && entries.size < max) return
      entries.delete(key)
    }
  }
  return {
    find: (key, now) => {
      const entry = entries.get(key)
      return entry !== undefined && entry.until > now ? { answer: entry.answer } : undefined
    },
    open: (key, now) => {
      entries.delete(key)
      prune(now)
      entries.set(key, { answer: undefined, until: now + lifetimeMs })
    },
    answered: (key, datagram) => {
      const entry = entries.get(key)
      if (entry !== undefined) entry.answer = datagram
    },
    size: () => entries.size
  }
}

/** An exchange is a message ID from one endpoint (RFC 7252 §4.5): the token plays no part. */
export const exchangeKey = (address: string, port: number, messageId: number | undefined): string =>
  `${address}|${port}|${messageId ?? ""}`

const ACK = 2
const NON = 1

/**
 * The message ID a datagram we send answers: an ACK (piggybacked or empty) or a NON response
 * carries the request's message ID. Confirmable (separate) responses and Resets have their own.
 */
export const answeredMessageId = (datagram: Uint8Array): number | undefined => {
  if (datagram.length < 4) return undefined
  const type = (datagram[0] >> 4) & 0x3
  return type === ACK || type === NON ? datagram[2] * 256 + datagram[3] : undefined
}
