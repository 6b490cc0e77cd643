/** RFC 7252 §4.8.2 EXCHANGE_LIFETIME (247 s): how long a copy of a message may still arrive. */
export const EXCHANGE_LIFETIME_MS = 247_000

/**
 * Exchanges remembered at most. Beyond this the oldest are forgotten early, and a copy of
 * one of them arriving later would be processed again. Retransmissions come within
 * MAX_TRANSMIT_SPAN (45 s, §4.8.2): 50 000 covers that up to ~1 100 requests/s, and the
 * whole EXCHANGE_LIFETIME up to ~200 requests/s.
 */
export const MAX_EXCHANGES = 50_000

export interface Exchanges<A> {
  /**
   * The reply to an exchange: an earlier copy's (finished or still being worked out), else
   * `start()`'s, kept for `lifetimeMs` from `now`.
   */
  reply(key: string, now: number, start: () => Promise<A>): Promise<A>
  /** Whether the exchange is known (answered or being answered). */
  has(key: string, now: number): boolean
  readonly size: () => number
}

/**
 * Message deduplication (RFC 7252 §4.5): every copy of a message gets the same reply and
 * the request is processed once. The coap package caches a reply only once it is sent, so
 * a copy arriving while the first is still being stored would reach the handler again;
 * this covers that window and the later ones alike.
 */
export const makeExchanges = <A>(lifetimeMs = EXCHANGE_LIFETIME_MS, max = MAX_EXCHANGES): Exchanges<A> => {
  // Map order is insertion order and every entry lives as long, so the oldest come first.
  const entries = new Map<string, { readonly reply: Promise<A>; readonly until: number }>()
  const prune = (now: number) => {
    for (const [key, entry] of entries) {
      if (entry.until > now && entries.size < max) return
      entries.delete(key)
    }
  }
  return {
    reply: (key, now, start) => {
      const known = entries.get(key)
      if (known !== undefined && known.until > now) return known.reply
      entries.delete(key)
      prune(now)
      const reply = start()
      entries.set(key, { reply, until: now + lifetimeMs })
      return reply
    },
    has: (key, now) => (entries.get(key)?.until ?? 0) > now,
    size: () => entries.size
  }
}

/** An exchange is a message ID and token from one endpoint (RFC 7252 §4.5, §5.3.2). */
export const exchangeKey = (address: string, port: number, messageId: number | undefined, token: Uint8Array | undefined): string =>
  `${address}|${port}|${messageId ?? ""}|${token === undefined ? "" : Buffer.from(token).toString("hex")}`
