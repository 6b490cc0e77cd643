/**
 * What a new PGlite starts from, loaded once for a run of opens (`embedded.ts` opens, the worker
 * `pgliteWorker.ts` starts PGlite from them): Postgres's and initdb's wasm compiled, PGlite's file
 * bundle, and the initdb template (its tar followed by its SHA-256), read and written here.
 *
 * Only erasable TypeScript here: the worker imports this file and Node 24 (and Deno) run it as it is.
 */
import { createHash } from "node:crypto"
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, sep } from "node:path"
import { clearTimeout, setTimeout } from "node:timers"
import { fileURLToPath } from "node:url"

/**
 * What every PGlite of a process starts from, loaded once: Postgres's and initdb's wasm compiled
 * (a `WebAssembly.Module` crosses to a worker without being compiled again) and PGlite's file
 * bundle (`pglite.data`, the share directory). Each PGlite loads and compiles them anew otherwise.
 */
export interface Artifacts {
  readonly pglite: WebAssembly.Module
  readonly initdb: WebAssembly.Module
  readonly bundle: SharedArrayBuffer
}

/**
 * The initdb template: a new database's files as Postgres's initdb left them, in a tar, kept in
 * `node_modules/.cache/voltaic/` beside the PGlite they came from (named by its version). Initdb
 * is most of what opening a new PGlite costs: 2.4-3.5 s and as much CPU on this project's 2-core
 * machines, against 0.9-1.0 s to unpack the template, in memory or on disk (a first start with a
 * new DATA_DIR, `DATABASE_URL=memory://`, and the test suites, which open hundreds). The first
 * database made in memory writes it (its dump, 40 MB, 0.4 s); it carries a SHA-256 of itself and
 * one that does not match is not used (`templateTar`). Undefined where no `node_modules`
 * holds PGlite (Deno's own cache): every new database is then made by initdb.
 */
export const initdbTemplate = (): string | undefined => {
  try {
    const entry = fileURLToPath(import.meta.resolve("@electric-sql/pglite"))
    const at = entry.lastIndexOf(`${sep}node_modules${sep}`)
    if (at < 0) return undefined
    const modules = entry.slice(0, at + sep.length + "node_modules".length)
    const { version } = JSON.parse(readFileSync(join(modules, "@electric-sql", "pglite", "package.json"), "utf8")) as { version: string }
    return join(modules, ".cache", "voltaic", `pglite-${version}-initdb.tar`)
  } catch {
    return undefined
  }
}

/** Bytes in a buffer the process's threads share (a worker reads them without a copy crossing). */
const shared = (bytes: Uint8Array): SharedArrayBuffer => {
  const buffer = new SharedArrayBuffer(bytes.byteLength)
  new Uint8Array(buffer).set(bytes)
  return buffer
}

/**
 * What a run of opens shares (the test suites open ~130 databases, a few seconds apart), dropped
 * once no open used it for `keptForOpens.ms`: a server, which opens one, does not keep the template's
 * 40 MB and the bundle's 6 MB it read for it.
 */
let kept: {
  artifacts?: Promise<Artifacts | undefined>
  template?: { readonly key: string; readonly tar: SharedArrayBuffer }
} = {}
/** How long `kept` stays after the last open that used it (tests shorten it). */
export const keptForOpens = { ms: 30_000 }
let dropKept: ReturnType<typeof setTimeout> | undefined
const keepAWhile = () => {
  clearTimeout(dropKept)
  dropKept = setTimeout(() => {
    kept = {}
  }, keptForOpens.ms)
  dropKept.unref()
}

/** PGlite's artifacts, loaded once for a run of opens; undefined where its files are not beside its module (Deno's cache). */
export const pgliteArtifacts = (): Promise<Artifacts | undefined> => {
  keepAWhile()
  kept.artifacts ??= (async () => {
    try {
      const entry = import.meta.resolve("@electric-sql/pglite")
      const file = (name: string) => readFileSync(fileURLToPath(new URL(name, entry)))
      const [pglite, initdb] = await Promise.all([WebAssembly.compile(file("pglite.wasm")), WebAssembly.compile(file("initdb.wasm"))])
      return { pglite, initdb, bundle: shared(file("pglite.data")) }
    } catch {
      return undefined
    }
  })()
  return kept.artifacts
}

const DIGEST_BYTES = 32

/**
 * The template's tar when `file` holds one whose SHA-256 (its last 32 bytes) matches, read once
 * for a run of opens while the file stays the same (its inode, size and modification time): a
 * file replaced or changed is read again.
 */
export const templateTar = (file: string): SharedArrayBuffer | undefined => {
  keepAWhile()
  let key: string
  try {
    const stat = statSync(file)
    key = `${file} ${stat.ino} ${stat.size} ${stat.mtimeMs}`
  } catch {
    return undefined
  }
  if (kept.template?.key === key) return kept.template.tar
  let bytes: Buffer
  try {
    bytes = readFileSync(file)
  } catch {
    return undefined
  }
  if (bytes.length <= DIGEST_BYTES) return undefined
  const tar = bytes.subarray(0, bytes.length - DIGEST_BYTES)
  if (!createHash("sha256").update(tar).digest().equals(bytes.subarray(bytes.length - DIGEST_BYTES))) return undefined
  kept.template = { key, tar: shared(tar) }
  return kept.template.tar
}

/** Writes the template whole or not at all (a file beside it, renamed over it); a failure only costs the next initdb. */
export const writeTemplate = (file: string, tar: Uint8Array) => {
  try {
    mkdirSync(dirname(file), { recursive: true })
    const partial = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}`
    writeFileSync(partial, Buffer.concat([tar, createHash("sha256").update(tar).digest()]))
    renameSync(partial, file)
  } catch {
    // A read-only node_modules, a full disk: new databases keep coming from initdb.
  }
}
