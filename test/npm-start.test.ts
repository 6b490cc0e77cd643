import { execFileSync, spawnSync } from "node:child_process"
import { accessSync, constants, readFileSync } from "node:fs"
import { join } from "node:path"
import { createServer } from "node:net"
import { createSocket } from "node:dgram"
import { describe, expect, it } from "vitest"
import { ROOT, spawnNpmStart, startServerProcess } from "./support/process.ts"

/** Whether a TCP port on 127.0.0.1 can be bound (nobody holds it). */
const tcpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

const udpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createSocket("udp4")
    socket.once("error", () => resolve(false))
    socket.bind(port, "127.0.0.1", () => socket.close(() => resolve(true)))
  })

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("npm start: the built JavaScript, stopped by a signal to npm", () => {
  it("runs dist/ under node (no tsx), and SIGTERM to the npm process stops the server and frees every port within 10 s", async () => {
    const server = await startServerProcess({ DATABASE_URL: "memory://" }, 180_000, spawnNpmStart)
    const npmPid = server.child.pid!
    // npm's child is the server itself: the script execs node after the build.
    const children = execFileSync("pgrep", ["-P", String(npmPid)], { encoding: "utf8" }).trim().split("\n").map(Number)
    expect(children).toHaveLength(1)
    const command = execFileSync("ps", ["-o", "args=", "-p", String(children[0])], { encoding: "utf8" })
    expect(command).toContain("dist/src/main.js")
    expect(command).not.toContain("tsx")
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/health`)
    expect(res.status).toBe(200)

    const signalled = Date.now()
    const code = await server.stop("SIGTERM")
    const took = Date.now() - signalled
    expect(took).toBeLessThan(10_000)
    expect(code).toBe(0)
    expect(alive(children[0])).toBe(false)
    for (const port of [server.port, server.mqttPort, server.mqttWsPort]) expect(await tcpFree(port)).toBe(true)
    expect(await udpFree(server.coapPort)).toBe(true)
  }, 240_000)

  it("builds the package's bin, dist/src/cli/main.js: an executable with a shebang that runs the built tool", () => {
    execFileSync(process.execPath, ["scripts/build.mjs", "--if-needed"], { cwd: ROOT, stdio: "ignore" })
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"))
    expect(pkg.bin).toEqual({ voltaic: "dist/src/cli/main.js" })
    const bin = join(ROOT, pkg.bin.voltaic)
    expect(readFileSync(bin, "utf8").split("\n")[0]).toBe("#!/usr/bin/env node")
    accessSync(bin, constants.X_OK)
    // Run by its shebang, from the built JavaScript with the migrations copied beside it.
    const migrated = spawnSync(bin, ["migrate"], { cwd: ROOT, env: { ...process.env, DATABASE_URL: "memory://" }, encoding: "utf8" })
    expect(migrated.stderr).toBe("")
    expect(migrated.status).toBe(0)
    expect(migrated.stdout).toMatch(/^PGlite in memory: applied \d+ migrations:\n  0001_init\.sql\n/)
  }, 240_000)
})
