import { Effect, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { link, mkdir, readFile, unlink, writeFile } from "node:fs/promises"
import { hostname } from "node:os"
import { join, resolve } from "node:path"

/** The lock's name inside `DATA_DIR`; PGlite ignores files it does not know there. */
export const LOCK_FILE = "voltaic.lock"

/** `DATA_DIR` is held by another live process (a server, or the command-line tool). */
export class DataDirLocked extends Schema.TaggedError<DataDirLocked>()("DataDirLocked", {
  setting: Schema.String,
  message: Schema.String
}) {}

/** What the lock file holds: enough to name the holder and to tell whether it still runs. */
interface Holder {
  readonly pid: number
  readonly host: string
  readonly startedAt: string
  /** What holds it: `voltaic server`, `voltaic admin reset-password`. */
  readonly role: string
  /** Tells this process's lock from a later one with the same pid. */
  readonly nonce: string
}

/** Directories locked by this process: a second open here is refused too, whatever the pid says. */
const heldHere = new Set<string>()

const errorCode = (cause: unknown): string | undefined =>
  typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined

const parseHolder = (text: string): Holder | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    if (typeof value !== "object" || value === null) return undefined
    const { pid, host, startedAt, role, nonce } = value as Record<string, unknown>
    return typeof pid === "number" && typeof host === "string" && typeof startedAt === "string" &&
        typeof role === "string" && typeof nonce === "string"
      ? { pid, host, startedAt, role, nonce }
      : undefined
  } catch {
    return undefined
  }
}

/**
 * Whether the holder may still be running. Another host cannot be asked, so its lock stands.
 * On this host the kernel is asked (signal 0). Our own pid or our parent's cannot be a holder:
 * after a kill -9 in a container the next start often gets the same pid (as Postgres reasons
 * about postmaster.pid).
 */
const mayBeRunning = (holder: Holder): boolean => {
  if (holder.host !== hostname()) return true
  if (holder.pid === process.pid || holder.pid === process.ppid) return false
  try {
    process.kill(holder.pid, 0)
    return true
  } catch (cause) {
    // EPERM: the process exists but belongs to another user. Deno without --allow-run
    // refuses to ask (NotCapable): the lock then stands.
    return errorCode(cause) !== "ESRCH"
  }
}

const holderText = (holder: Holder) => `process ${holder.pid} (${holder.role}) on host ${holder.host}, started ${holder.startedAt}`

const describe = (dataDir: string, holder: Holder): string => {
  const who = holderText(holder)
  const remedy = holder.host === hostname()
    ? "stop it first, or give this process another DATA_DIR"
    : `stop it first; if it is gone, delete ${join(dataDir, LOCK_FILE)}`
  return `${dataDir} is in use by ${who}: ${remedy}`
}

const readHolder = (path: string): Promise<string | undefined> =>
  readFile(path, "utf8").catch((cause) => (errorCode(cause) === "ENOENT" ? undefined : Promise.reject(cause)))

/**
 * Takes `dataDir/voltaic.lock`. The file is written whole under a private name and then
 * hard-linked into place, which fails if the lock exists (atomic, as O_EXCL, and never seen
 * half-written). A lock whose process is gone (kill -9) is taken over at once: no waiting
 * for it to age, unlike lock files kept fresh by a timer. Resolves to the release function.
 */
const acquire = async (dataDir: string, role: string): Promise<() => Promise<void>> => {
  const key = resolve(dataDir)
  const path = join(dataDir, LOCK_FILE)
  const me: Holder = {
    pid: process.pid,
    host: hostname(),
    startedAt: new Date(Date.now() - process.uptime() * 1000).toISOString(),
    role,
    nonce: randomBytes(8).toString("hex")
  }
  const mine = JSON.stringify(me)
  if (heldHere.has(key)) throw new DataDirLocked({ setting: "DATA_DIR", message: describe(dataDir, me) })
  await mkdir(dataDir, { recursive: true })
  const draft = `${path}.${me.pid}.${me.nonce}`
  await writeFile(draft, mine, { flag: "wx" })
  try {
    // A few rounds: each one either takes the lock, finds a live holder, or removes a dead one.
    for (let round = 0; round < 5; round++) {
      try {
        await link(draft, path)
        heldHere.add(key)
        return async () => {
          heldHere.delete(key)
          // Only our own lock: never one a later process took over.
          if ((await readHolder(path)) === mine) await unlink(path).catch(() => undefined)
        }
      } catch (cause) {
        if (errorCode(cause) !== "EEXIST") throw cause
      }
      const text = await readHolder(path)
      if (text === undefined) continue
      const holder = parseHolder(text)
      if (holder !== undefined && mayBeRunning(holder)) {
        throw new DataDirLocked({ setting: "DATA_DIR", message: describe(dataDir, holder) })
      }
      // Dead or unreadable: removed only if it is still the file judged, so a lock another
      // starting process has just put in its place is not taken from it.
      if ((await readHolder(path)) === text) await unlink(path).catch(() => undefined)
    }
    throw new Error(`${path}: could not be taken after 5 attempts`)
  } finally {
    await unlink(draft).catch(() => undefined)
  }
}

/**
 * Holds `DATA_DIR` for this process until the scope closes: one process per PGlite
 * directory (two would each keep their own copy of the database and lose the other's writes).
 */
export const lockDataDir = (dataDir: string, role: string) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => acquire(dataDir, role),
      catch: (cause) =>
        cause instanceof DataDirLocked
          ? cause
          : new DataDirLocked({
            setting: "DATA_DIR",
            message: `cannot lock ${dataDir}: ${cause instanceof Error ? cause.message : String(cause)}`
          })
    }),
    (release) => Effect.promise(release)
  )

/**
 * Who holds `dataDir`, found without taking it (so a server starting meanwhile is not refused):
 * `process 123 (voltaic server) on host h, started …`, or undefined when it is free (no lock,
 * or one a process that is gone left, which the next opener takes over).
 */
export const dataDirHolder = async (dataDir: string): Promise<string | undefined> => {
  const text = await readHolder(join(dataDir, LOCK_FILE))
  const holder = text === undefined ? undefined : parseHolder(text)
  if (holder === undefined || !mayBeRunning(holder)) return undefined
  return holderText(holder)
}
