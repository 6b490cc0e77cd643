/**
 * The embedded database's own thread: PGlite (Postgres compiled to WASM) runs every statement
 * here, so the thread that serves HTTP, MQTT and CoAP never waits on it. `embedded.ts` starts
 * this file as a `worker_threads` Worker and speaks to it in `Request`/`Reply` messages.
 *
 * Only erasable TypeScript here: Node 24 (and Deno) run this file as it is, and `npm run build`
 * compiles it beside `embedded.js`.
 */
import { PGlite, protocol, type Results, type Transaction } from "@electric-sql/pglite"
import { existsSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { parentPort, workerData } from "node:worker_threads"
import type { Origin, Reply, Request, StartData, ThrownError } from "./embedded.ts"
import { durableDisk } from "./pgliteDisk.ts"
import { writeTemplate } from "./pgliteFiles.ts"

const port = parentPort
if (port === null) throw new Error("pgliteWorker: not started as a worker thread")

/** A failure as plain data: its message and every primitive field (`code`, `constraint`, `detail`…). */
const thrown = (cause: unknown): ThrownError => {
  const fields: Record<string, string | number | boolean> = {}
  if (typeof cause === "object" && cause !== null) {
    for (const [key, value] of Object.entries(cause)) {
      if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") fields[key] = value
    }
  }
  return { message: cause instanceof Error ? cause.message : String(cause), fields }
}

const reply = (message: Reply) => port.postMessage(message)
const fail = (id: number, cause: unknown) => reply({ id, error: thrown(cause) })

/** Answers request `id` once `run` settles: with its result (a query's), or with its failure, thrown at once or later. */
const answer = (id: number, run: () => Promise<Results<unknown> | undefined>) => {
  let pending: Promise<Results<unknown> | undefined>
  try {
    pending = run()
  } catch (cause) {
    return fail(id, cause)
  }
  pending.then((result) => reply(result === undefined ? { id } : { id, result }), (cause: unknown) => fail(id, cause))
}

/** Frontend protocol messages as one buffer, for `execProtocol`. */
const messages = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((size, part) => size + part.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}

/** The callback's way out of `PGlite.transaction` that rolls back without an error to report. */
const ROLLBACK = Symbol("rollback")

interface Open {
  readonly tx: Transaction
  readonly end: (commit: boolean) => void
  readonly settled: Promise<void>
}

/**
 * Bytes PGlite takes as a `Blob` (a template, its file bundle), handed over as they are: Node's
 * `Blob` copies them in and reads them out in 64 KiB chunks (~0.4 s of a 40 MB template's
 * open). PGlite reads such a blob by `arrayBuffer()` alone; this answers a private copy, so
 * nothing PGlite does reaches the buffer the process's threads share.
 */
class BytesBlob extends Blob {
  readonly #bytes: Uint8Array
  constructor(bytes: Uint8Array) {
    super()
    this.#bytes = bytes
  }
  override arrayBuffer(): Promise<ArrayBuffer> {
    return Promise.resolve(this.#bytes.slice().buffer)
  }
}

/**
 * An in-memory database's Postgres keeps a 16 MB buffer cache instead of its default 128 MB. Its
 * files are in this thread's memory already (Emscripten's MEMFS), so a page outside the cache is a
 * copy, not a read from a disk; and Emscripten zero-fills the whole cache at every start: 128 MB
 * was ~0.4 s of the ~1 s a new database took to open from the template (its `memset`, in a CPU
 * profile of six opens: 3.1 s against 0.5 s), and as much memory touched for nothing.
 */
const IN_MEMORY_START_PARAMS = [...PGlite.defaultStartParams, "-c", "shared_buffers=16MB"]

/**
 * PGlite open in `dataDir` (in memory when undefined). A new database is unpacked from the initdb
 * template when one is kept (`initdbTemplate` in pgliteFiles.ts), else made by initdb; one made by
 * initdb in memory, before anything else is in it, is dumped to be the template. A template is
 * never written from a DATA_DIR: that dump would carry its lock file (`voltaic.lock`).
 */
const openPglite = async (data: StartData): Promise<{ readonly db: PGlite; readonly origin: Origin }> => {
  // On disk with a working fsync (pgliteDisk.ts): a commit is answered once it is on the disk.
  const loaded = data.artifacts === undefined
    ? {}
    : { pgliteWasmModule: data.artifacts.pglite, initdbWasmModule: data.artifacts.initdb, fsBundle: new BytesBlob(new Uint8Array(data.artifacts.bundle)) }
  const options = data.dataDir === undefined ? { ...loaded, startParams: IN_MEMORY_START_PARAMS } : { ...loaded, ...durableDisk(data.dataDir) }
  if (data.exists) return { db: await PGlite.create(options), origin: "existing" }
  const tar = data.templateTar
  if (tar !== undefined) {
    try {
      return { db: await PGlite.create({ ...options, loadDataDir: new BytesBlob(new Uint8Array(tar)) }), origin: "template" }
    } catch (cause) {
      // In memory nothing is left behind: initdb below, and its dump replaces the template.
      if (data.dataDir !== undefined) throw cause
    }
  }
  const db = await PGlite.create(options)
  if (data.template !== undefined && data.dataDir === undefined) {
    // A failed dump only costs the next open an initdb, as a failed write does.
    const dump = await db.dumpDataDir("none").then((blob) => blob.arrayBuffer()).catch(() => undefined)
    if (dump !== undefined) writeTemplate(data.template, new Uint8Array(dump))
  }
  return { db, origin: "initdb" }
}

/**
 * The permanent btree indexes' files (their main fork, relative to the data directory). Catalogs
 * are among them: each is one query's worth, and a catalog index splits its pages too.
 */
const BTREE_INDEX_FILES = `SELECT pg_relation_filepath(c.oid) AS path
  FROM pg_class c JOIN pg_am am ON am.oid = c.relam
  WHERE c.relkind = 'i' AND am.amname = 'btree' AND c.relpersistence = 'p'`

/** One free-space-map page as Postgres extends the fork: zeros, which it reads as a new page (no free space recorded). */
const EMPTY_FSM_PAGE = new Uint8Array(8192)

/**
 * Gives each btree index without a free-space map (FSM) fork a one-page, empty one, in the data
 * directory on disk; answers how many it made.
 *
 * Postgres makes an index's FSM only when VACUUM records a free page in it, which an index only
 * ever appended to (events' three) never has. Without the fork, every page split asks for it
 * again (`fsm_readbuf` caches only a size it found): in native Postgres one failed `open`, under
 * PGlite's NODEFS a path walk, a failed `lstat` thrown as a Node error and again as an Emscripten
 * one through the wasm frames, then the same `open` and `close` when it checks again. With an
 * empty page there, Postgres reads "no free page" from its buffer and asks the file system
 * nothing; a VACUUM that frees pages extends the fork as it would have made it. bench:store, the
 * writer's 4,000-event batches, events' indexes without their maps: 1.03-1.12× the cost of a stored
 * event in four runs (the variant "indexes without free-space maps"). FSM forks are not
 * WAL-logged (Postgres rebuilds what it needs of them), and a dropped or rewritten index takes
 * its forks with it, the new file getting its map at the next start's `migrate`.
 *
 * Runs between statements on this thread, so Postgres never finds the fork half made nor makes
 * one meanwhile; an existing fork is left as it is (and `wx` refuses to overwrite one).
 */
const freeSpaceMaps = async (db: PGlite, dataDir: string | undefined): Promise<number> => {
  if (dataDir === undefined) return 0
  const { rows } = await db.query<{ path: string }>(BTREE_INDEX_FILES)
  let made = 0
  for (const { path } of rows) {
    const map = join(dataDir, `${path}_fsm`)
    if (!existsSync(join(dataDir, path)) || existsSync(map)) continue
    writeFileSync(map, EMPTY_FSM_PAGE, { flag: "wx", mode: 0o600 })
    made += 1
  }
  return made
}

const start = async (data: StartData) => {
  let db: PGlite
  let origin: Origin
  try {
    ;({ db, origin } = await openPglite(data))
    // A new WAL segment is not filled with 16 MB of zeros first (Postgres's default, for file
    // systems that allocate on write). In memory that fill, a growing Emscripten file, held the
    // one statement that crossed into the segment for 260-400 ms (a command run's p99 in
    // bench:ingest); on disk ~15 ms. PGlite is one session: the setting holds for all its work.
    await db.exec("SET wal_init_zero = off")
  } catch (cause) {
    reply({ id: 0, error: thrown(cause) })
    return
  }
  const open = new Map<number, Open>()
  /**
   * The statements `write` ran, by text, each under the name it was prepared with in PGlite's one
   * session. PGlite's `query` parses, analyses and plans its statement anew at every call (an
   * unnamed statement): for the writer's batch of events and its devices' update, ~0.5 ms of the
   * 1.0-1.5 ms a batch of 1-10 events costs PGlite's thread (scratch measurement, 3,000 batches,
   * alternated). A prepared one is bound and run; Postgres replans it only when what it reads changes.
   */
  const prepared = new Map<string, string>()
  /** Statements kept prepared at most: the writer has a handful. */
  const MAX_PREPARED = 64
  const runPrepared = async (text: string, params: ReadonlyArray<string | null>) => {
    let name = prepared.get(text)
    if (name === undefined) {
      name = `voltaic_write_${prepared.size + 1}`
      // Prepared on its own first: a statement that fails to prepare is not kept, and one that
      // prepared is kept whatever its first run does.
      await db.execProtocol(messages([protocol.serialize.parse({ name, text }), protocol.serialize.sync()]))
      prepared.set(text, name)
    }
    // Rows, if any, are dropped; a failure is thrown (`throwOnError`), the session ready again after the Sync.
    await db.execProtocol(messages([protocol.serialize.bind({ statement: name, values: [...params] }), protocol.serialize.execute(), protocol.serialize.sync()]))
  }
  /**
   * `runPrepared` in turn with PGlite's own statements. `execProtocol` takes none of PGlite's locks,
   * so it takes those its `query` takes (`_runExclusiveTransaction`, `_runExclusiveQuery`: PGlite's
   * own, typed but internal; pinned with the package): outside a transaction it waits for any open
   * one to end, and in any case for the statement in progress.
   */
  const write = (on: PGlite | Transaction, text: string, params: ReadonlyArray<string | null>): Promise<unknown> => {
    // Kept for the session's life: a caller making texts without end (values spelled into the
    // statement) would grow the session's statements without end; past the bound, `query` runs them.
    if (!prepared.has(text) && prepared.size >= MAX_PREPARED) return on.query(text, [...params])
    return on !== db
      ? db._runExclusiveQuery(() => runPrepared(text, params))
      : db._runExclusiveTransaction(() => db._runExclusiveQuery(() => runPrepared(text, params)))
  }
  const target = (tx: number | undefined) => {
    if (tx === undefined) return db
    const entry = open.get(tx)
    if (entry === undefined) throw new Error(`no open transaction ${tx} on the embedded database`)
    return entry.tx
  }

  port.on("message", (request: Request) => {
    const { id } = request
    switch (request.op) {
      case "query":
        return answer(id, () => target(request.tx).query(request.text, request.params, request.array ? { rowMode: "array" } : undefined))
      case "exec":
        return answer(id, async () => void await target(request.tx).exec(request.text))
      case "write":
        return answer(id, async () => void await write(target(request.tx), request.text, request.params))
      case "script": {
        // One request for the whole transaction: no round trip to the other thread between statements.
        const steps = request.steps
        const run = async (on: PGlite | Transaction) => {
          for (const step of steps) {
            const params = step.params
            // A statement with text parameters only is run prepared, as `write` runs it.
            if (step.blob === undefined && params !== undefined && params.every((p) => typeof p === "string" || p === null)) {
              await write(on, step.text, params as ReadonlyArray<string | null>)
            } else await on.query(step.text, params === undefined ? undefined : [...params], step.blob === undefined ? undefined : { blob: new Blob([step.blob]) })
          }
        }
        return answer(id, async () => void await (request.tx === undefined ? db.transaction(run) : run(target(request.tx))))
      }
      case "begin": {
        // Opened when PGlite runs the callback (after BEGIN), held until an `end` settles it.
        let opened = false
        let settle!: { resolve: () => void; reject: (reason: unknown) => void }
        const body = new Promise<void>((resolve, reject) => {
          settle = { resolve, reject }
        })
        const settled = db.transaction((tx) => {
          opened = true
          open.set(id, { tx, end: (commit) => commit ? settle.resolve() : settle.reject(ROLLBACK), settled })
          reply({ id })
          return body
        })
        settled.catch((cause: unknown) => {
          if (!opened) fail(id, cause)
        })
        return
      }
      case "end": {
        const entry = open.get(request.tx)
        if (entry === undefined) return fail(id, new Error(`no open transaction ${request.tx} on the embedded database`))
        open.delete(request.tx)
        entry.end(request.commit)
        entry.settled.then(
          () => reply({ id }),
          (cause: unknown) => cause === ROLLBACK ? reply({ id }) : fail(id, cause)
        )
        return
      }
      case "freeSpaceMaps":
        return freeSpaceMaps(db, data.dataDir).then((made) => reply({ id, made }), (cause: unknown) => fail(id, cause))
      case "close":
        return answer(id, async () => void await db.close())
    }
  })
  reply({ id: 0, origin })
}

void start(workerData as StartData)
