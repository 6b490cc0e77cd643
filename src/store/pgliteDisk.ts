/**
 * PGlite on disk that survives a machine crash, not only a process crash.
 *
 * PGlite starts Postgres with `-F` (fsync off), and under its Node file system (Emscripten's
 * NODEFS) a sync does nothing even when asked for: `fdatasync` is a no-op in Emscripten, and
 * `fsync` calls the file system's `fsync`, which NODEFS does not have. A committed (and
 * acknowledged) write was then only in the operating system's page cache: a power cut could
 * lose it, and with fsync off Postgres may find its data directory corrupt afterwards.
 *
 * Here Postgres runs with fsync on and syncs its WAL with `fsync` (`wal_sync_method`: the call
 * that reaches the file system), and NODEFS's streams get an `fsync` that syncs the real file's
 * data (`fdatasync`, as Postgres's own default for the WAL on Linux; it still syncs a size that
 * grew): every commit reaches the disk before it is answered, and a checkpoint syncs the data
 * files it wrote, as Postgres does natively.
 *
 * Only erasable TypeScript here: the embedded store's worker (`pgliteWorker.ts`) imports it, and
 * Node 24 (and Deno) run that as it is.
 */
import { PGlite } from "@electric-sql/pglite"
import { NodeFS } from "@electric-sql/pglite/nodefs"
import { fdatasyncSync } from "node:fs"

type NodeFsInit = Parameters<NodeFS["init"]>

/** The part of Emscripten's module this touches: NODEFS's stream operations. */
interface WithNodeFs {
  readonly NODEFS?: { readonly stream_ops: Record<string, unknown> }
}

/** PGlite's start parameters without `-F` (so fsync is on), the WAL synced by `fsync`. */
const durableStartParams = (): Array<string> => [
  ...PGlite.defaultStartParams.filter((param) => param !== "-F"),
  "-c",
  "wal_sync_method=fsync"
]

/**
 * PGlite's NodeFS whose files can be synced. `onSync` is told of each sync (for tests).
 */
class SyncedNodeFS extends NodeFS {
  readonly #onSync: (() => void) | undefined

  constructor(dataDir: string, onSync?: () => void) {
    super(dataDir)
    this.#onSync = onSync
  }

  override async init(pg: NodeFsInit[0], opts: NodeFsInit[1]) {
    const { emscriptenOpts } = await super.init(pg, opts)
    const onSync = this.#onSync
    const syncable = (module: WithNodeFs) => {
      if (module.NODEFS === undefined) throw new Error("PGlite: its Emscripten module has no NODEFS to sync")
      module.NODEFS.stream_ops.fsync = (stream: { readonly nfd: number }) => {
        fdatasyncSync(stream.nfd)
        onSync?.()
        return 0
      }
    }
    return { emscriptenOpts: { ...emscriptenOpts, preRun: [...(emscriptenOpts.preRun ?? []), syncable] } }
  }
}

/** PGlite's options for a durable data directory on disk. */
export const durableDisk = (dataDir: string, onSync?: () => void) => ({
  fs: new SyncedNodeFS(dataDir, onSync),
  startParams: durableStartParams()
})
