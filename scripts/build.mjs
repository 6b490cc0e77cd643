// `npm run build`: the TypeScript of src/ and actors/ compiled into dist/ (tsconfig.build.json),
// with the migrations copied beside it (src/store/migrate.ts reads them relative to itself), and the
// command-line tool dist/src/cli/main.js (the package's bin) made executable.
// `--if-needed` (what `npm start` runs) skips the compiler when no source, migration or setting
// changed since the last build: a start then costs no build at all.
import { execFileSync } from "node:child_process"
import { chmodSync, cpSync, existsSync, readdirSync, statSync, utimesSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const stamp = join(root, "dist", ".tsbuildinfo")

const newest = (path) => {
  const info = statSync(path)
  if (!info.isDirectory()) return info.mtimeMs
  let latest = info.mtimeMs
  for (const entry of readdirSync(path)) latest = Math.max(latest, newest(join(path, entry)))
  return latest
}

const inputs = ["src", "actors", "migrations", "tsconfig.json", "tsconfig.build.json", "package-lock.json"].map((p) => join(root, p))
const upToDate = existsSync(stamp) && existsSync(join(root, "dist", "migrations")) &&
  Math.max(...inputs.map(newest)) <= statSync(stamp).mtimeMs

if (process.argv.includes("--if-needed") && upToDate) process.exit(0)
execFileSync(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" })
cpSync(join(root, "migrations"), join(root, "dist", "migrations"), { recursive: true })
// The package's bin (`voltaic`), run by its shebang: tsc writes files without the execute bit.
chmodSync(join(root, "dist", "src", "cli", "main.js"), 0o755)
// tsc leaves its build info untouched when the output did not change: the stamp is this build's.
const now = new Date()
utimesSync(stamp, now, now)
