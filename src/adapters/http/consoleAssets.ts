import { existsSync } from "node:fs"
import { readdir, readFile } from "node:fs/promises"
import { extname, join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"

/**
 * The operator console (`console/`, built by `scripts/build.mjs` with Vite into `dist/console`),
 * served by Voltaic itself: hashed assets under `/assets/` cached for a year, `index.html` never
 * cached, everything gzipped once when the process first serves it.
 */
export const CONSOLE_ASSETS_PREFIX = "/assets/"

/** Paths that are never the console's, even for a browser asking for HTML. */
const NOT_CONSOLE = /^\/(v1|docs|health|ready|metrics)(\/|$)/

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".json": "application/json",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2"
}
const COMPRESSIBLE = new Set([".html", ".js", ".css", ".svg", ".json"])

interface Asset {
  readonly type: string
  readonly body: Uint8Array<ArrayBuffer>
  readonly gzipped: Uint8Array<ArrayBuffer> | undefined
}

/**
 * `dist/console` beside the compiled server (`dist/src/adapters/http/…` → `dist/console`), or
 * under the checkout when the server runs from its sources (`src/…` through tsx). Vite's manifest
 * tells a build from the sources' own `console/` folder.
 */
const consoleDir = (): string | undefined => {
  const up = fileURLToPath(new URL("../../../", import.meta.url))
  const candidates = [join(up, "console"), join(up, "dist", "console")]
  return candidates.find((dir) => existsSync(join(dir, ".vite", "manifest.json")))
}

const walk = async (dir: string): Promise<Array<string>> => {
  const entries = await readdir(dir, { withFileTypes: true })
  const files = await Promise.all(entries.map((entry) => {
    const path = join(dir, entry.name)
    if (entry.name.startsWith(".")) return []
    return entry.isDirectory() ? walk(path) : [path]
  }))
  return files.flat()
}

const load = async (dir: string): Promise<Map<string, Asset>> => {
  const assets = new Map<string, Asset>()
  for (const path of await walk(dir)) {
    const ext = extname(path)
    const body = new Uint8Array(await readFile(path))
    const url = `/${relative(dir, path).split(sep).join("/")}`
    assets.set(url, { type: TYPES[ext] ?? "application/octet-stream", body, gzipped: COMPRESSIBLE.has(ext) ? new Uint8Array(gzipSync(body)) : undefined })
  }
  return assets
}

let loaded: Promise<Map<string, Asset>> | undefined

/** The built files, read once; undefined (and looked for again next time) while the console is not built. */
const assets = async (): Promise<Map<string, Asset> | undefined> => {
  if (loaded === undefined) {
    const dir = consoleDir()
    if (dir === undefined) return undefined
    loaded = load(dir)
  }
  return loaded
}

const respond = (asset: Asset, acceptEncoding: string | undefined, cacheControl: string, head: boolean): Response => {
  const gzip = asset.gzipped !== undefined && acceptEncoding !== undefined && /\bgzip\b/.test(acceptEncoding)
  const body = gzip && asset.gzipped !== undefined ? asset.gzipped : asset.body
  const headers: Record<string, string> = { "content-type": asset.type, "cache-control": cacheControl, "content-length": String(body.byteLength) }
  if (asset.gzipped !== undefined) headers.vary = "accept-encoding"
  if (gzip) headers["content-encoding"] = "gzip"
  return new Response(head ? null : body, { status: 200, headers })
}

export interface ConsoleRequest {
  readonly method: string
  readonly path: string
  readonly accept: string | undefined
  readonly acceptEncoding: string | undefined
}

/** `index.html`, when the console is built; else a page saying how to build it. */
export const consoleIndex = async (request: ConsoleRequest): Promise<Response> => {
  const files = await assets()
  const index = files?.get("/index.html")
  if (index === undefined) {
    return new Response("The operator console is not built: run `npm run build` (npm start does it when needed).\n", {
      status: 503,
      headers: { "content-type": "text/plain; charset=utf-8", "retry-after": "60" }
    })
  }
  return respond(index, request.acceptEncoding, "no-cache", request.method === "HEAD")
}

/** A hashed asset (`/assets/index-3f2a….js`); undefined for an unknown one. */
export const consoleAsset = async (request: ConsoleRequest): Promise<Response | undefined> => {
  const asset = (await assets())?.get(request.path)
  return asset === undefined ? undefined : respond(asset, request.acceptEncoding, "public, max-age=31536000, immutable", request.method === "HEAD")
}

/**
 * A client-side route of the console (`/devices/dev_…`) loaded by the browser: a GET asking for
 * HTML outside the server's own paths gets `index.html`; anything else is not the console's.
 */
export const consoleRoute = async (request: ConsoleRequest): Promise<Response | undefined> => {
  if (request.method !== "GET" && request.method !== "HEAD") return undefined
  if (request.accept === undefined || !request.accept.includes("text/html")) return undefined
  if (NOT_CONSOLE.test(request.path) || request.path.startsWith(CONSOLE_ASSETS_PREFIX)) return undefined
  if ((await assets()) === undefined) return undefined
  return consoleIndex(request)
}
