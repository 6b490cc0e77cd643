/**
 * Progress of a long command on stderr: on a terminal one line redrawn in place (a bar, done
 * of total, the rate and the time left), elsewhere (a log file, CI) a plain line every few
 * seconds. Hand-written rather than a library: the one line needs a rate and two output
 * modes, which a bar library leaves to a custom format and payload anyway, for a few dozen
 * lines here.
 */

/** Where progress goes: `process.stderr`, or a test's recorder. */
export interface ProgressOutput {
  readonly isTTY?: boolean | undefined
  readonly columns?: number | undefined
  write(text: string): unknown
}

export interface ProgressOptions {
  /** What is being done: `importing`. */
  readonly label: string
  readonly total: number
  readonly unit: "rows" | "bytes"
  /** Milliseconds, monotonic; `performance.now` unless a test steps it. */
  readonly now?: () => number
  /** Between two redraws on a terminal, or two plain lines elsewhere. */
  readonly everyMs?: number
}

export interface Progress {
  /** `done` of the total so far; drawn when the last drawing is old enough. */
  update(done: number): void
  /** Draws the final figures and ends the terminal line. */
  finish(): void
}

const count = (n: number) => Math.round(n).toLocaleString("en-US")
const megabytes = (n: number) => `${(n / 1_000_000).toFixed(1)} MB`

/** `45s`, `3m05s`, `2h03m`. */
export const formatDuration = (seconds: number): string => {
  const s = Math.max(0, Math.round(seconds))
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`
}

/** Before this much time a rate is noise: none is shown. */
const SETTLE_MS = 500

export const makeProgress = (out: ProgressOutput, options: ProgressOptions): Progress => {
  const now = options.now ?? (() => performance.now())
  const tty = out.isTTY === true
  const everyMs = options.everyMs ?? (tty ? 100 : 2_000)
  const started = now()
  let drawnAt = started
  let done = 0
  const amount = (n: number) => (options.unit === "bytes" ? megabytes(n) : count(n))

  /** `54,000/120,000 rows (45%), 23,456 rows/s, 3s left`; rate and time left once they mean something. */
  const figures = (at: number) => {
    const total = Math.max(options.total, done)
    const percent = total === 0 ? 100 : Math.floor((done / total) * 100)
    const elapsed = at - started
    const parts = [`${options.unit === "bytes" ? `${amount(done)} of ${amount(total)}` : `${amount(done)}/${amount(total)} rows`} (${percent}%)`]
    if (elapsed >= SETTLE_MS && done > 0) {
      const rate = done / (elapsed / 1000)
      parts.push(options.unit === "bytes" ? `${megabytes(rate)}/s` : `${count(rate)} rows/s`)
      if (done < total) parts.push(`${formatDuration((total - done) / rate)} left`)
    }
    return { text: parts.join(", "), fraction: total === 0 ? 1 : done / total }
  }

  const draw = (at: number) => {
    const { text, fraction } = figures(at)
    if (!tty) {
      out.write(`${options.label}: ${text}\n`)
      return
    }
    const width = Math.max(10, Math.min(30, (out.columns ?? 80) - options.label.length - text.length - 5))
    const filled = Math.round(fraction * width)
    // \r back to the line's start, \x1b[K clears what a longer earlier drawing left.
    out.write(`\r${options.label} ${"█".repeat(filled)}${"░".repeat(width - filled)} ${text}\x1b[K`)
  }

  return {
    update(value) {
      done = value
      const at = now()
      if (at - drawnAt < everyMs) return
      drawnAt = at
      draw(at)
    },
    finish() {
      if (!tty) return
      draw(now())
      out.write("\n")
    }
  }
}
