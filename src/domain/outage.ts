/**
 * The state of one dependency's link (the store's connections, the bus): lost once, restored
 * once, however many statements or messages fail in between, so that an outage is two log
 * lines. Callers on a hot path read `down` and `epoch` only.
 */
export interface Outage {
  /** True from the first sign of a loss until `restored`. */
  readonly down: boolean
  /**
   * Counts the signs of loss and the recoveries. Work started before the last sign of loss
   * proves nothing about the link now (a connection not yet seen closing can still answer
   * it), nor does work that failed after starting before the last recovery (a connection
   * attempt begun during the outage): both take the epoch read when the work started.
   */
  readonly epoch: number
  /** A sign of loss, from work started at `epoch` if given: logged only when the link was up. */
  lost(reason: string, epoch?: number): void
  /** Work started at `epoch` succeeded: logged only when the link was down and the epoch current. */
  restored(epoch: number): void
}

export interface OutageLines {
  /** The warning for a loss, given its first reason. */
  readonly lost: (reason: string) => string
  /** The line for the recovery, given the outage's length in seconds (two decimals under 1 s, else one). */
  readonly restored: (seconds: string) => string
}

export interface OutageLog {
  readonly warn: (message: string) => void
  readonly info: (message: string) => void
}

export const makeOutage = (lines: OutageLines, log: OutageLog, now: () => number = () => performance.now()): Outage => {
  let since = 0
  let restoredAt = 0
  const outage = {
    down: false,
    epoch: 0,
    lost: (reason: string, epoch?: number) => {
      if (epoch !== undefined && epoch < restoredAt) return
      outage.epoch += 1
      if (outage.down) return
      outage.down = true
      since = now()
      log.warn(lines.lost(reason))
    },
    restored: (epoch: number) => {
      if (!outage.down || epoch !== outage.epoch) return
      outage.down = false
      outage.epoch += 1
      restoredAt = outage.epoch
      const seconds = (now() - since) / 1000
      log.info(lines.restored(seconds.toFixed(seconds < 1 ? 2 : 1)))
    }
  }
  return outage
}
