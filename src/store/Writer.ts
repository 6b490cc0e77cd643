import { Context, Effect, Exit, Layer } from "effect"
import { Unavailable } from "../domain/errors.ts"
import { observeBatch, observeCommit } from "../metrics.ts"
import { cutOff, type WriteItem, writeRetried } from "./batch.ts"
import { Sql, type SqlClient, type SqlError } from "./Sql.ts"

export type { CommandRunRow, EventFile, EventRow, LocationRow, WriteItem } from "./batch.ts"

export interface WriterOptions {
  /** Rows one flush writes at most. */
  readonly maxBatch: number
  /** Rows waiting beyond this are refused (503 / 5.03) instead of growing memory. */
  readonly maxPending: number
  /**
   * Rows waiting beyond this are refused even to a sender that can wait (`submit` with `wait`):
   * MQTT, whose connections aedes stops reading until their publishes are answered, so each
   * connection has at most one socket read of publishes waiting.
   */
  readonly maxWaiting: number
  /** Batches being written at once: the next one is built and sent while one commits. */
  readonly maxFlushes: number
  /**
   * Under sustained load (`isLoaded`), the least time between the starts of two batches written
   * one at a time: what arrives meanwhile waits and joins the next. A writer idle for this long,
   * or starting batches less often than every `2 × flushEveryMs` on average, writes at once.
   */
  readonly flushEveryMs: number
  /**
   * How long a batch whose connection was lost is written again (with a backoff up to 1 s)
   * before it is answered with the failure: a short outage delays acknowledgements instead of
   * refusing them, while the waiting items stay bounded by `maxPending` and `maxWaiting`.
   */
  readonly retryLostForMs: number
}

/**
 * `flushEveryMs`: each batch costs about as much as ten events (Postgres ~200 µs for the
 * statement and its commit, plus a socket write and read here, and the wake-ups of both
 * processes). Flushing back to back at 5,000 events/s made batches of ~5 at ~900 a second;
 * 2 ms made them ~10 at ~500 a second. bench:ingest's latency case on Postgres, three
 * alternating pairs: the machine's busy cores 1.35 → 0.98 (Postgres 0.40 → 0.25, this process
 * 0.48 → 0.36), publish → subscriber p99 9.9 / 22.5 / 20.8 → 9.9 / 8.9 / 19.2 ms, for 1.1 ms
 * more at the median (1.9 → 3.0 ms).
 *
 * 1 ms measured better than 2 on another machine (session 36, bench/RESULTS.md): the latency case
 * at 5,000 events/s, alternating pairs, Postgres p50 3.19 / 3.08 / 3.39 against 4.08 / 4.28 / 4.60 ms
 * and p99 14.9 / 15.1 / 15.0 against 17.8 / 25.0 / 33.1, PGlite p50 3.58 / 3.11 against 4.22 / 4.24
 * and p99 17.4 / 12.5 against 18.3 / 16.2; for ~0.08 core more of Postgres (0.40-0.43 against
 * 0.32-0.35) or ~0.15 more of this process on PGlite. QoS 0 throughput and the command case the same.
 * On an AMD EPYC machine (session 37) it bought ~0.8 ms of p50 but cost 1-2 ms of p99 in 7 of 8
 * comparisons (Postgres 0.36-0.39 against 0.27-0.32 core): kept, the gain there being the larger.
 *
 * That spacing only pays under sustained load: bench:ingest's REST command case (ten
 * `POST /v1/commands/run` every 10 ms, on ten connections) had its first request of a burst
 * written alone and the other nine, arrived while it committed, held 2 ms more for the spacing
 * in 42 % of the bursts (latency 4.4 against 2.2 ms). So a writer starting fewer than one batch
 * per `2 × flushEveryMs` on average (`loadedGap`) adds no wait: what arrived during a commit
 * goes as soon as it is answered.
 */
export const defaultWriterOptions: WriterOptions = {
  maxBatch: 2_000,
  maxPending: 20_000,
  maxWaiting: 100_000,
  maxFlushes: 2,
  flushEveryMs: 1,
  retryLostForMs: 10_000
}

/**
 * PGlite's batches hold up to 4,000 rows. A batch touches each of its devices once (their
 * `lastSeenAt`, and the check that they exist): ~15 µs of PGlite's one thread per device, which
 * bounds the embedded store's MQTT QoS 0 ingest. In a flood over 1,000 devices a batch of 2,000
 * held ~865 of them (0.43 per event), one of 4,000 ~980 (0.25 per event). A batch of 4,000 holds
 * the store's thread ~100 ms, which only a backlog that long builds (a lone event still goes at
 * once). bench:store, 4,000 events a round over 1,000 devices: half-size batches cost 1.05-1.09×
 * (the variant "half-size batches (the writer's before)"; bench/RESULTS.md, session 33).
 */
export const PGLITE_MAX_BATCH = 4_000

/** The store is behind: the item was not taken. */
export const storeBehind = new Unavailable({ retryAfterSeconds: 1, message: "the store is behind; retry shortly" })

export interface WriterService {
  /** Resolves once the transaction holding the item committed: only then may it be acknowledged. */
  write(item: WriteItem): Effect.Effect<void, Unavailable | SqlError>
  /**
   * `write` without a fiber: `done` is called once the item's batch committed (or failed).
   * Answers false, without calling `done`, when the store is behind; `wait` lets the item in
   * up to `maxWaiting` instead of `maxPending` (a sender held back by its transport).
   */
  submit(item: WriteItem, done: (exit: Exit.Exit<void, SqlError>) => void, wait?: boolean): boolean
  /** Items waiting or being written now (for back-pressure decisions and metrics). */
  readonly pending: () => number
}

interface Waiter {
  readonly item: WriteItem
  readonly resume: (exit: Exit.Exit<void, SqlError>) => void
}

/**
 * Group commit: items that arrive while batches are being written, or (under sustained load)
 * within `flushEveryMs` of the last batch's start, wait and go together in the next one, so
 * throughput grows with load while a lightly loaded writer adds no delay. Up to `maxFlushes`
 * batches are written at once; they are answered in the order they were taken, so a device's
 * acknowledgements and deliveries keep the order of its writes.
 */
/** Told of each batch as it starts, with its size: for metrics, and for tests that time the spacing rule. */
export type OnBatch = (size: number) => void

export const makeWriter = (sql: SqlClient, options: Partial<WriterOptions> & { readonly onBatch?: OnBatch } = {}) => {
  const { maxBatch, maxFlushes, maxPending, maxWaiting, flushEveryMs, retryLostForMs } = { ...defaultWriterOptions, ...options }
  const onBatch = options.onBatch
  const secondFlushAt = Math.max(1, Math.floor(maxBatch / 4))
  let queue: Array<Waiter> = []
  let writing = 0
  let flushes = 0
  let scheduled = false
  /** When the last batch started (performance.now()). */
  let lastStart = -Infinity
  /**
   * The mean time between batch starts (an exponentially weighted average over ~8 batches, each
   * gap counted up to `longestGap` so that one idle spell does not outweigh the rest).
   * It starts at 0, as if loaded: a flood right after start is spaced at once.
   */
  let meanGap = 0
  const loadedGap = 2 * flushEveryMs
  const longestGap = 10 * flushEveryMs
  const isLoaded = () => meanGap < loadedGap
  /** Settles after the last batch taken was answered: batches are answered in order. */
  let answered: Promise<void> = Promise.resolve()
  let idle: Array<() => void> = []

  const resumeAll = (batch: ReadonlyArray<Waiter>, exits: Exit.Exit<void, SqlError> | ReadonlyArray<Exit.Exit<void, SqlError>>) => {
    for (let i = 0; i < batch.length; i++) batch[i].resume(Array.isArray(exits) ? exits[i] : exits as Exit.Exit<void, SqlError>)
  }

  const writeOne = async (batch: ReadonlyArray<Waiter>): Promise<Exit.Exit<void, SqlError> | Array<Exit.Exit<void, SqlError>>> => {
    const started = performance.now()
    const exit = await Effect.runPromiseExit(writeRetried(sql, batch.map((w) => w.item), retryLostForMs))
    observeCommit((performance.now() - started) / 1000)
    if (Exit.isSuccess(exit) || batch.length === 1 || cutOff(exit)) return exit
    // One bad row (say, its device was deleted meanwhile) must not fail its neighbours.
    const exits: Array<Exit.Exit<void, SqlError>> = []
    for (const waiter of batch) {
      const last = exits.at(-1)
      // The store was lost meanwhile and stayed lost: the rest is not tried one by one.
      exits.push(last !== undefined && cutOff(last) ? last : await Effect.runPromiseExit(writeRetried(sql, [waiter.item], retryLostForMs)))
    }
    return exits
  }

  /**
   * An idle writer flushes at once. With a batch in flight, a loaded writer starts another only
   * for a sizeable backlog: a trickle waits the one round trip and goes as one batch (each batch
   * costs a statement, a socket write here and a commit there, whatever its size). A writer that
   * is not loaded starts it at once (up to `maxFlushes`): the few batches it writes cost little,
   * and what arrived just after a batch started does not wait for that batch's commit.
   */
  const worthFlushing = () => queue.length > 0 && (flushes === 0 || (flushes < maxFlushes && (queue.length >= secondFlushAt || !isLoaded())))

  const flush = () => {
    scheduled = false
    // Under load, a lone batch (none in flight) waits out `flushEveryMs`; a second one is for a backlog.
    const early = flushes === 0 && isLoaded() ? lastStart + flushEveryMs - performance.now() : 0
    if (early > 0 && worthFlushing()) {
      scheduled = true
      setTimeout(flush, early)
      return
    }
    if (worthFlushing()) {
      const now = performance.now()
      meanGap += (Math.min(now - lastStart, longestGap) - meanGap) / 8
      lastStart = now
    }
    while (worthFlushing()) {
      const batch = queue.length <= maxBatch ? queue : queue.slice(0, maxBatch)
      queue = queue.length <= maxBatch ? [] : queue.slice(maxBatch)
      flushes += 1
      writing += batch.length
      onBatch?.(batch.length)
      observeBatch(batch.length)
      const written = writeOne(batch)
      const previous = answered
      answered = written.then(async (exits) => {
        await previous
        writing -= batch.length
        resumeAll(batch, exits)
      })
      void written.then(() => {
        flushes -= 1
        if (queue.length > 0) schedule()
        else if (flushes === 0) void answered.then(() => {
          if (flushes > 0 || queue.length > 0) return
          const waiting = idle
          idle = []
          for (const resolve of waiting) resolve()
        })
      })
    }
  }

  const schedule = () => {
    if (scheduled || !worthFlushing()) return
    scheduled = true
    // Whatever arrives in this turn of the event loop (the rest of a socket read, other
    // connections' packets) joins the batch.
    setImmediate(flush)
  }

  const submit: WriterService["submit"] = (item, done, wait = false) => {
    if (queue.length >= (wait ? maxWaiting : maxPending)) return false
    queue.push({ item, resume: done })
    schedule()
    return true
  }

  const service: WriterService = {
    pending: () => queue.length + writing,
    submit,
    write: (item) =>
      Effect.callback<void, Unavailable | SqlError>((resume) => {
        if (!submit(item, resume)) resume(Effect.fail(storeBehind))
      })
  }
  const close = () =>
    queue.length === 0 && flushes === 0 && writing === 0
      ? Promise.resolve()
      : new Promise<void>((resolve) => idle.push(resolve))
  return { service, close }
}

export class Writer extends Context.Service<Writer, WriterService>()("voltaic/store/Writer") {
  static readonly layer = Layer.effect(
    Writer,
    Effect.gen(function*() {
      const sql = yield* Sql
      const writer = yield* Effect.acquireRelease(
        Effect.sync(() => makeWriter(sql, sql.dialect === "pglite" ? { maxBatch: PGLITE_MAX_BATCH } : {})),
        (w) => Effect.promise(() => w.close())
      )
      return writer.service
    })
  )
}
