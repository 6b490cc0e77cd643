import { execFileSync } from "node:child_process"
import { join } from "node:path"
import { ROOT } from "./process.ts"

/**
 * Vitest's global setup: the operator console built (when its sources changed) before any test
 * runs, so the browser tests find it on a fresh clone with no dist/ (`npm ci && npm test`).
 */
export default function setup(): void {
  execFileSync(process.execPath, [join(ROOT, "scripts", "build.mjs"), "--console", "--if-needed"], { cwd: ROOT, stdio: "inherit" })
}
