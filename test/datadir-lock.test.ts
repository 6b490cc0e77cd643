import { existsSync } from "node:fs"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { LOCK_FILE } from "../src/store/dataDirLock.ts"
import { runServerToExit, startServerProcess } from "./support/process.ts"

let dataDir: string
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "voltaic-lock-"))
})
afterAll(() => rm(dataDir, { recursive: true, force: true }))

const stderrLines = (stderr: string) => stderr.trim().split("\n").filter((l) => !/^npm warn/.test(l))

describe("one server process per PGlite DATA_DIR", () => {
  it("refuses a second server with one line naming DATA_DIR and the holder, and starts again after a kill -9", async () => {
    const dir = join(dataDir, "shared")
    const first = await startServerProcess({ DATA_DIR: dir })
    try {
      const second = await runServerToExit({ DATA_DIR: dir })
      expect(second.code).toBe(1)
      const lines = stderrLines(second.stderr)
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatch(
        new RegExp(`^voltaic: DATA_DIR: ${dir} is in use by process ${first.child.pid} \\(voltaic server\\) on host \\S+, started \\S+: stop it first`)
      )
      // The refused process opened nothing: the first still serves.
      expect((await fetch(`http://127.0.0.1:${first.port}/health`)).status).toBe(200)
    } finally {
      await first.stop("SIGKILL")
    }
    // The dead process's lock is still there, and does not stop the next start.
    expect(existsSync(join(dir, LOCK_FILE))).toBe(true)
    const third = await startServerProcess({ DATA_DIR: dir })
    expect((await fetch(`http://127.0.0.1:${third.port}/health`)).status).toBe(200)
    expect(await third.stop()).toBe(0)
    // Released on a clean shutdown.
    expect(existsSync(join(dir, LOCK_FILE))).toBe(false)
  }, 120_000)
})
