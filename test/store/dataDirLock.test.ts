import { Cause, Effect, Exit, Scope } from "effect"
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { DataDirLocked, LOCK_FILE, lockDataDir } from "../../src/store/dataDirLock.ts"

let root: string
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "voltaic-lockfile-"))
})
afterAll(() => rm(root, { recursive: true, force: true }))

/** Takes the lock in a scope of its own: the failure it raised, or a function closing it. */
const take = async (dir: string) => {
  const scope = await Effect.runPromise(Scope.make())
  const exit = await Effect.runPromiseExit(Scope.provide(scope)(lockDataDir(dir, "test")))
  const failure = Exit.isFailure(exit) ? exit.cause.reasons.find(Cause.isFailReason)?.error : undefined
  return { failure, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

const holderFile = (pid: number, host = hostname()) =>
  JSON.stringify({ pid, host, startedAt: "2026-01-01T00:00:00.000Z", role: "voltaic server", nonce: "0" })

/** The pid of a process that has exited. */
const deadPid = () =>
  new Promise<number>((resolve) => {
    const child = spawn(process.execPath, ["-e", ""])
    child.once("exit", () => resolve(child.pid ?? 0))
  })

/** Writes each lock file and expects it to be refused and left as it was. */
const expectRefused = async (cases: ReadonlyArray<readonly [string, string]>) => {
  for (const [name, content] of cases) {
    const dir = join(root, name)
    await mkdir(dir, { recursive: true })
    await writeFile(join(dir, LOCK_FILE), content)
    const taken = await take(dir)
    expect(taken.failure).toBeInstanceOf(DataDirLocked)
    expect(await readFile(join(dir, LOCK_FILE), "utf8")).toBe(content)
    await taken.close()
  }
}

describe("the DATA_DIR lock", () => {
  it("is refused to a second taker in the same process, and released on close", async () => {
    const dir = join(root, "same")
    const first = await take(dir)
    expect(first.failure).toBeUndefined()
    const second = await take(dir)
    expect(second.failure).toBeInstanceOf(DataDirLocked)
    expect(second.failure).toMatchObject({ setting: "DATA_DIR", message: expect.stringContaining(`process ${process.pid} (test)`) })
    await first.close()
    expect(existsSync(join(dir, LOCK_FILE))).toBe(false)
    const third = await take(dir)
    expect(third.failure).toBeUndefined()
    await third.close()
  })

  it("takes over the lock of a process that is gone, or an unreadable one", async () => {
    for (const [name, content] of [["dead", holderFile(await deadPid())], ["garbled", "{"]] as const) {
      const dir = join(root, name)
      await mkdir(dir, { recursive: true })
      await writeFile(join(dir, LOCK_FILE), content)
      const taken = await take(dir)
      expect(taken.failure).toBeUndefined()
      expect(JSON.parse(await readFile(join(dir, LOCK_FILE), "utf8"))).toMatchObject({ pid: process.pid, role: "test" })
      await taken.close()
    }
  })

  it("leaves a live process's lock, and another host's, in place", async () => {
    const live = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"])
    try {
      await expectRefused([["live", holderFile(live.pid ?? 0)], ["elsewhere", holderFile(999_999, "another-host")]])
    } finally {
      live.kill("SIGKILL")
    }
  })
})
