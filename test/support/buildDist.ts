import { execFileSync } from "node:child_process"
import { join } from "node:path"
import { ROOT } from "./process.ts"

/**
 * Vitest's global setup: `npm run build`'s output brought up to date (each part only when its
 * sources changed, `--if-needed`) before any test runs, so that a fresh clone with no dist/
 * (`npm ci && npm test`) has what the suites start: the server and the command-line tool the
 * process tests spawn (test/support/process.ts), and the operator console the browser tests load.
 */
export default function setup(): void {
  execFileSync(process.execPath, [join(ROOT, "scripts", "build.mjs"), "--if-needed"], { cwd: ROOT, stdio: "inherit" })
}
