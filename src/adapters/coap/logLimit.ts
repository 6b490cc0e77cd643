/** A peer (address and port) gets at most one line per this many milliseconds about datagrams dropped from it. */
export const DROP_LOG_WINDOW_MS = 10_000

/**
 * Lines about dropped datagrams logged at most per window, whatever the number of peers: a
 * flood from ever new ports or spoofed addresses gets at most this many lines per 10 s.
 */
export const MAX_DROP_LINES = 50

/** What was held back before a line that may be logged. */
export interface Held {
  /** Lines about this peer held back since its last line. */
  readonly fromPeer: number
  /** Lines about other peers held back since the last line: over the total cap, or counted for a peer that went quiet. */
  readonly fromOthers: number
}

export interface LogLimit {
  /** May a line about `peer` be logged at `now`? What was held back until then, or undefined: hold this one back too. */
  admit(peer: string, now: number): Held | undefined
}

/**
 * Rate-limits log lines that strangers can cause at will (garbage datagrams): the first line
 * about a peer is logged, the next ones within `windowMs` are counted, and the next line
 * logged after that says how many were held back. At most `maxLines` lines per window are
 * logged in all (spoofed source addresses cannot flood the log either); those held back over
 * that cap, and counts of peers that went quiet, are reported with the next line logged.
 * Peers are remembered for one window after their last line: at most 2 × `maxLines` at once.
 */
export const makeLogLimit = (windowMs = DROP_LOG_WINDOW_MS, maxLines = MAX_DROP_LINES): LogLimit => {
  // Insertion order is the order their windows end in: every window is as long.
  const peers = new Map<string, { readonly until: number; held: number }>()
  let total = { until: 0, lines: 0 }
  let othersHeld = 0
  const prune = (now: number) => {
    for (const [peer, entry] of peers) {
      if (entry.until > now) return
      othersHeld += entry.held
      peers.delete(peer)
    }
  }
  return {
    admit: (peer, now) => {
      const entry = peers.get(peer)
      if (entry !== undefined && entry.until > now) {
        entry.held += 1
        return undefined
      }
      if (total.until <= now) total = { until: now + windowMs, lines: 0 }
      if (total.lines >= maxLines) {
        othersHeld += 1
        return undefined
      }
      total.lines += 1
      const fromPeer = entry?.held ?? 0
      peers.delete(peer)
      prune(now)
      const held = { fromPeer, fromOthers: othersHeld }
      othersHeld = 0
      peers.set(peer, { until: now + windowMs, held: 0 })
      return held
    }
  }
}

/** `line` with what was held back before it, e.g. `… (12 more from this peer, 3 from others not logged)`. */
export const withHeld = (line: string, held: Held): string => {
  const notes = [
    ...(held.fromPeer > 0 ? [`${held.fromPeer} more from this peer`] : []),
    ...(held.fromOthers > 0 ? [`${held.fromOthers} from others`] : [])
  ]
  return notes.length === 0 ? line : `${line} (${notes.join(", ")} not logged)`
}
