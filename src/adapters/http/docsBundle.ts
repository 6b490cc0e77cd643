import { readFile } from "node:fs/promises"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { gzipSync } from "node:zlib"

/** Where the API reference's script is served, by Voltaic itself: `/docs` works with no network beyond the server. */
export const DOCS_SCRIPT_PATH = "/docs/scalar.js"

/**
 * `@scalar/api-reference`'s standalone bundle (one self-contained script, 4.8 MB, 1.3 MB
 * gzipped), which `@scalar/hono-api-reference` otherwise loads from jsDelivr. Read on the first
 * request and kept, with its gzip, for the life of the process.
 */
const load = async () => {
  const entry = createRequire(import.meta.url).resolve("@scalar/api-reference")
  const script = await readFile(join(dirname(entry), "browser", "standalone.js"))
  return { script, gzipped: gzipSync(script) }
}

let loaded: ReturnType<typeof load> | undefined

/** The bundle as a response, gzipped when the client accepts it. */
export const docsScript = async (acceptEncoding: string | undefined): Promise<Response> => {
  loaded ??= load()
  const { script, gzipped } = await loaded
  const gzip = acceptEncoding !== undefined && /\bgzip\b/.test(acceptEncoding)
  const headers: Record<string, string> = {
    "content-type": "text/javascript; charset=utf-8",
    // The file changes only with the package's version, which a restart brings.
    "cache-control": "public, max-age=3600",
    vary: "accept-encoding"
  }
  if (gzip) headers["content-encoding"] = "gzip"
  const body = gzip ? gzipped : script
  return new Response(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), { status: 200, headers })
}
