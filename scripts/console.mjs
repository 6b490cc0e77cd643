// The operator console (console/): Preact pages bundled by Vite into dist/console, which the
// server serves at / (src/adapters/http/consoleAssets.ts). Vite writes hashed file names and a
// manifest (dist/console/.vite/manifest.json), by which the server knows a build.
import { join } from "node:path"
import { build } from "vite"

/** Builds the console from `root`/console into `root`/dist/console. */
export const buildConsole = (root) =>
  build({
    root: join(root, "console"),
    base: "/",
    configFile: false,
    logLevel: "warn",
    // JSX for Preact (its automatic runtime), compiled by Vite's own transformer.
    oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
    build: {
      outDir: join(root, "dist", "console"),
      emptyOutDir: true,
      manifest: true,
      target: "es2022",
      reportCompressedSize: false
    }
  })
