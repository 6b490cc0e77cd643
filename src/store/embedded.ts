import type { Results } from "@electric-sql/pglite"
import { existsSync } from "node:fs"
import { extname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { setFlagsFromString } from "node:v8"
import { Worker } from "node:worker_threads"
import { type Artifacts, initdbTemplate, pgliteArtifacts, templateTar } from "./pgliteFiles.ts"

/**
 * The embedded database (PGlite) on its own thread.
 *
 * PGlite runs Postgres as WASM in the thread that calls it: every statement's planning,
 * execution and row parsing would stop the event loop that serves HTTP, MQTT and CoAP. Here it
 * runs in a `worker_threads` Worker (`pgliteWorker.ts`); this side posts each statement and
 * resolves its promise with the worker's answer (rows parsed there, copied here by structured
 * clone). A transaction is held open in the worker between a `begin` and its `end`, and
 * statements name it; PGlite runs one statement or transaction at a time, as it did in-thread.
 *
 * PGlite's own `@electric-sql/pglite/worker` is built for browser tabs: it elects a leader with
 * `navigator.locks` and `BroadcastChannel`, which Node 20 lacks, and carries a multi-tab protocol
 * one server process does not need.
 */

export interface EmbeddedQueryable {
  query<T = Record<string, unknown>>(
    text: string,
    params?: ReadonlyArray<unknown>,
    options?: { readonly rowMode?: "array" | "object" }
  ): Promise<Results<T>>
  exec(text: string): Promise<void>
  /**
   * One statement whose rows are not needed, its parameters text (or null): kept prepared on the
   * store's thread, parsed and planned once per text instead of at every call.
   */
  write(text: string, params: ReadonlyArray<string | null>): Promise<void>
  /**
   * Statements run in order in one transaction (inside `transaction`: in it), sent in one
   * request; `blob` is the data of a `COPY … FROM '/dev/blob'`. A failure rolls all back.
   */
  script(steps: ReadonlyArray<ScriptStatement>): Promise<void>
}

/** One statement of a `script`. */
export interface ScriptStatement {
  readonly text: string
  readonly params?: ReadonlyArray<unknown> | undefined
  readonly blob?: string | undefined
}

export interface EmbeddedDb extends EmbeddedQueryable {
  /**
   * How the database came to be: found where it was (`existing`), made by Postgres's initdb, or
   * unpacked from the initdb template (`template`, see `initdbTemplate`).
   */
  readonly origin: Origin
  /**
   * Runs `f` in one transaction: committed when its promise resolves, rolled back (and the
   * failure re-thrown) when it rejects. Other statements wait until it ends.
   */
  transaction<A>(f: (tx: EmbeddedQueryable) => Promise<A>): Promise<A>
  /**
   * Gives each btree index that has none an empty free-space map (on disk; in memory nothing):
   * see `freeSpaceMaps` in pgliteWorker.ts. Answers how many it made. `migrate` calls it last.
   */
  freeSpaceMaps(): Promise<number>
  close(): Promise<void>
}

export type Origin = "existing" | "initdb" | "template"

/** What the worker is started with. */
export interface StartData {
  readonly dataDir: string | undefined
  /** Where the initdb template is kept (none when undefined). */
  readonly template: string | undefined
  /** The database is in `dataDir` already (its `PG_VERSION`): opened as it is. */
  readonly exists: boolean
  /** The template's tar, read and verified by this process (`templateTar`); undefined: none kept, or the database exists. */
  readonly templateTar: SharedArrayBuffer | undefined
  /** PGlite's compiled wasm and file bundle, loaded once by this process (`pgliteArtifacts`); undefined: PGlite loads its own. */
  readonly artifacts: Artifacts | undefined
}

/** A failure crossing the thread boundary: the message and every primitive field (`code`…). */
export interface ThrownError {
  readonly message: string
  readonly fields: Readonly<Record<string, string | number | boolean>>
}

export type Request =
  | {
    readonly id: number
    readonly op: "query"
    readonly text: string
    readonly params: Array<unknown> | undefined
    readonly array: boolean
    readonly tx: number | undefined
  }
  | { readonly id: number; readonly op: "exec"; readonly text: string; readonly tx: number | undefined }
  | { readonly id: number; readonly op: "write"; readonly text: string; readonly params: ReadonlyArray<string | null>; readonly tx: number | undefined }
  | { readonly id: number; readonly op: "script"; readonly steps: ReadonlyArray<ScriptStatement>; readonly tx: number | undefined }
  | { readonly id: number; readonly op: "begin" }
  | { readonly id: number; readonly op: "end"; readonly tx: number; readonly commit: boolean }
  | { readonly id: number; readonly op: "freeSpaceMaps" }
  | { readonly id: number; readonly op: "close" }

/** The answer to request `id` (0: the worker's start, with `origin`); `result` for a query, `made` for `freeSpaceMaps`. */
export interface Reply {
  readonly id: number
  readonly result?: Results<unknown>
  readonly made?: number
  readonly error?: ThrownError
  readonly origin?: Origin
}

/** The failure as an Error carrying the database's fields, as PGlite's own `DatabaseError` does. */
const rebuilt = (error: ThrownError): Error => Object.assign(new Error(error.message), error.fields)

/** The worker's file beside this one: `.ts` when run from the sources, `.js` when built. */
const workerUrl = () => new URL(`./pgliteWorker${extname(fileURLToPath(import.meta.url))}`, import.meta.url)

/** Flags of the process a worker takes too and must: how modules load (tsx's loader, with the sources). */
const LOADING_WITH_VALUE = new Set(["--import", "--require", "-r", "--loader", "--experimental-loader", "--conditions", "-C"])
const LOADING = new Set(["--experimental-strip-types", "--no-experimental-strip-types", "--experimental-transform-types", "--enable-source-maps"])

/**
 * The process's flags a worker is started with: those that say how modules load. A worker
 * inherits all of them by default and refuses to start on others (V8's heap flags, which
 * `npm start` sets and which hold for the whole process anyway; `--input-type` of `node -e`).
 */
export const workerFlags = (execArgv: ReadonlyArray<string>): Array<string> => {
  const kept: Array<string> = []
  for (let i = 0; i < execArgv.length; i++) {
    const flag = execArgv[i]
    const name = flag.split("=", 1)[0]
    if (LOADING.has(flag)) kept.push(flag)
    else if (LOADING_WITH_VALUE.has(name)) {
      kept.push(flag)
      if (!flag.includes("=") && i + 1 < execArgv.length) kept.push(execArgv[++i])
    }
  }
  return kept
}

/**
 * V8's wasm-to-JS wrappers kept generic: a process running PGlite ended three times on a V8 fatal
 * check, `jit_page_->allocations_.erase(addr) == 1`, in `Runtime_TierUpWasmToJSWrapper` →
 * `WasmCodeAllocator::FreeCode` (Node 24.9.0 and 24.21.0, V8 13.6: a bench server, and a vitest
 * worker in each of two CI runs, every time with PGlite threads started and ended beside each
 * other). V8 swaps an import's generic wrapper for a compiled one after 1,000 calls
 * (`--wasm-wrapper-tiering-budget`), and that swap is the path that crashed; with a budget of 2^31 - 1
 * calls no import gets there in practice (at 100,000 calls a second, after six hours, once). Cost:
 * a call from PGlite's wasm to JS stays on the generic wrapper, about 30 ns slower (45 against 14 ns
 * in a bare loop). V8 flags are the process's, so this is set once, before the first PGlite starts;
 * V8 before 12 (Node 20) has no such tier-up and no such flag.
 */
let wrappersKeptGeneric = false
export const keepWasmWrappersGeneric = () => {
  if (wrappersKeptGeneric) return
  wrappersKeptGeneric = true
  if (Number(process.versions.v8?.split(".")[0]) >= 12) setFlagsFromString("--wasm-wrapper-tiering-budget=2147483647")
}

/**
 * Opens PGlite in `dataDir` (in memory when undefined) on its own thread; a new database comes
 * from `template` when it holds one (default: `initdbTemplate()`; null: never).
 */
export const openEmbedded = async (dataDir: string | undefined, template: string | null = initdbTemplate() ?? null): Promise<EmbeddedDb> => {
  keepWasmWrappersGeneric()
  const exists = dataDir !== undefined && existsSync(join(dataDir, "PG_VERSION"))
  const start: StartData = {
    dataDir,
    exists,
    template: template ?? undefined,
    templateTar: template === null || exists ? undefined : templateTar(template),
    artifacts: await pgliteArtifacts()
  }
  return startWorker(start)
}

const startWorker = (start: StartData): Promise<EmbeddedDb> =>
  new Promise((resolveOpen, rejectOpen) => {
    const worker = new Worker(workerUrl(), { workerData: start, execArgv: workerFlags(process.execArgv) })
    const waiting = new Map<number, { resolve: (reply: Reply) => void; reject: (error: Error) => void }>()
    let next = 1
    let opened = false
    let origin: Origin = "existing"
    let ended: Error | undefined

    const call = (request: Request): Promise<Reply> => {
      if (ended !== undefined) return Promise.reject(ended)
      return new Promise((resolve, reject) => {
        if (waiting.size === 0) worker.ref()
        waiting.set(request.id, { resolve, reject })
        worker.postMessage(request)
      })
    }
    const stop = (error: Error) => {
      if (ended !== undefined) return
      ended = error
      for (const { reject } of waiting.values()) reject(error)
      waiting.clear()
      if (!opened) rejectOpen(error)
    }
    worker.on("error", (cause) => stop(new Error(`the embedded database's thread failed: ${cause.message}`)))
    worker.on("exit", (code) => stop(new Error(`the embedded database's thread ended (exit code ${code})`)))
    worker.on("message", (reply: Reply) => {
      if (reply.id === 0) {
        if (reply.error !== undefined) {
          stop(rebuilt(reply.error))
          void worker.terminate()
          return
        }
        opened = true
        origin = reply.origin ?? "existing"
        // From here the thread keeps the process alive only while an answer is awaited, so a
        // process whose other work is done exits without closing the database, as it did in-thread.
        if (waiting.size === 0) worker.unref()
        resolveOpen(db)
        return
      }
      const entry = waiting.get(reply.id)
      if (entry === undefined) return
      waiting.delete(reply.id)
      if (waiting.size === 0) worker.unref()
      if (reply.error !== undefined) entry.reject(rebuilt(reply.error))
      else entry.resolve(reply)
    })

    const queryable = (tx: number | undefined): EmbeddedQueryable => ({
      query: <T>(text: string, params?: ReadonlyArray<unknown>, options?: { readonly rowMode?: "array" | "object" }) =>
        call({ id: next++, op: "query", text, params: params === undefined ? undefined : [...params], array: options?.rowMode === "array", tx })
          .then((reply) => reply.result as Results<T>),
      exec: (text) => call({ id: next++, op: "exec", text, tx }).then(() => undefined),
      write: (text, params) => call({ id: next++, op: "write", text, params, tx }).then(() => undefined),
      script: (steps) => call({ id: next++, op: "script", steps, tx }).then(() => undefined)
    })

    const db: EmbeddedDb = {
      ...queryable(undefined),
      get origin() {
        return origin
      },
      transaction: async <A>(f: (tx: EmbeddedQueryable) => Promise<A>) => {
        const tx = next++
        await call({ id: tx, op: "begin" })
        let value: A
        try {
          value = await f(queryable(tx))
        } catch (cause) {
          // A failed ROLLBACK (the thread gone) leaves `cause` the failure to report.
          await call({ id: next++, op: "end", tx, commit: false }).catch(() => undefined)
          throw cause
        }
        await call({ id: next++, op: "end", tx, commit: true })
        return value
      },
      freeSpaceMaps: () => call({ id: next++, op: "freeSpaceMaps" }).then((reply) => reply.made ?? 0),
      close: async () => {
        if (ended !== undefined) return
        try {
          await call({ id: next++, op: "close" })
        } finally {
          stop(new Error("the embedded database is closed"))
          await worker.terminate()
        }
      }
    }
  })
