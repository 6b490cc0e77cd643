// `npm run build`: the TypeScript of src/ and actors/ compiled into dist/ (tsconfig.build.json),
// with the migrations copied beside it (src/store/migrate.ts reads them relative to itself), the
// command-line tool dist/src/cli/main.js (the package's bin) made executable, and the operator
// console (console/) bundled by Vite into dist/console (scripts/console.mjs).
// `--if-needed` (what `npm start` runs) skips each part whose sources, migrations or settings did
// not change since its last build: a start then costs no build at all.
// The tests' global setup runs it with `--if-needed` too: the suites spawn the built server and
// tool (test/support/process.ts) and load the console.
import { execFileSync } from "node:child_process"
import { chmodSync, cpSync, existsSync, readdirSync, statSync, utimesSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const ifNeeded = process.argv.includes("--if-needed")

const newest = (path) => {
  const info = statSync(path)
  if (!info.isDirectory()) return info.mtimeMs
  let latest = info.mtimeMs
  for (const entry of readdirSync(path)) latest = Math.max(latest, newest(join(path, entry)))
  return latest
}

/** True when `stamp` exists and is newer than every input. */
const upToDate = (stamp, inputs) => existsSync(stamp) && Math.max(...inputs.map((p) => newest(join(root, p)))) <= statSync(stamp).mtimeMs

const touch = (path) => {
  const now = new Date()
  utimesSync(path, now, now)
}

const serverStamp = join(root, "dist", ".tsbuildinfo")
const serverInputs = ["src", "actors", "migrations", "tsconfig.json", "tsconfig.build.json", "package-lock.json"]
const serverCurrent = upToDate(serverStamp, serverInputs) && existsSync(join(root, "dist", "migrations"))

if (!(ifNeeded && serverCurrent)) {
  execFileSync(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" })
  cpSync(join(root, "migrations"), join(root, "dist", "migrations"), { recursive: true })
  // The package's bin (`voltaic`), run by its shebang: tsc writes files without the execute bit.
  chmodSync(join(root, "dist", "src", "cli", "main.js"), 0o755)
  // tsc leaves its build info untouched when the output did not change: the stamp is this build's.
  touch(serverStamp)
}

const consoleStamp = join(root, "dist", "console", ".vite", "manifest.json")
const consoleInputs = ["console", "scripts/console.mjs", "package-lock.json"]
if (!(ifNeeded && upToDate(consoleStamp, consoleInputs))) {
  // Loaded only to build: Vite is not needed by a start with nothing to build.
  const { buildConsole } = await import("./console.mjs")
  await buildConsole(root)
  touch(consoleStamp)
}
