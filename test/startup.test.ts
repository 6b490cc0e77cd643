import { mkdtemp, rm } from "node:fs/promises"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY, startApp } from "./support/app.ts"
import { runServerToExit, startServerProcess } from "./support/process.ts"

let dataDir: string
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "voltaic-"))
})
afterAll(() => rm(dataDir, { recursive: true, force: true }))

describe("restart on PGlite", () => {
  it("keeps every row and bootstraps only once", async () => {
    const dir = join(dataDir, "restart")
    const first = await startApp({ DATA_DIR: dir })
    const space = await first.call("POST", "/spaces", { key: BOOTSTRAP_KEY, body: { name: "Kept", timezone: "Europe/Dublin" } })
    const device = await first.call("POST", "/devices", { key: BOOTSTRAP_KEY, body: { name: "Kept meter", space: { id: space.body.id } } })
    const org = (await first.call("GET", "/whoami", { key: BOOTSTRAP_KEY })).body.organisation.id
    await first.close()

    const second = await startApp({ DATA_DIR: dir, BOOTSTRAP_APP_KEY: "a_sk_a_different_key_that_is_ignored" })
    try {
      expect((await second.call("GET", `/devices/${device.body.id}`, { key: BOOTSTRAP_KEY })).body).toEqual(
        (({ secretKey: _, ...rest }) => rest)(device.body)
      )
      expect((await second.call("GET", `/spaces/${space.body.id}`, { key: BOOTSTRAP_KEY })).body).toEqual(space.body)
      // The device key still authenticates after the restart.
      expect((await second.call("GET", "/devices/me", { key: device.body.secretKey })).body.id).toBe(device.body.id)
      expect((await second.call("GET", "/whoami", { key: BOOTSTRAP_KEY })).body.organisation.id).toBe(org)
      // No second organisation, and the new BOOTSTRAP_APP_KEY was not added.
      expect((await second.call("GET", "/whoami", { key: "a_sk_a_different_key_that_is_ignored" })).status).toBe(401)
    } finally {
      await second.close()
    }
  })
})

describe("the server process", () => {
  it("starts on free ports, prints first-start secrets once, and stops on SIGTERM", async () => {
    const dir = join(dataDir, "process")
    const first = await startServerProcess({ DATA_DIR: dir })
    const health = await fetch(`http://127.0.0.1:${first.port}/health`)
    expect(health.status).toBe(200)
    expect(first.output()).toContain("admin password:")
    const key = /application key:\s+(a_sk_\S+)/.exec(first.output())?.[1]
    expect(key).toBeDefined()
    const whoami = await fetch(`http://127.0.0.1:${first.port}/v1/whoami`, { headers: { authorization: `Bearer ${key}` } })
    expect(whoami.status).toBe(200)
    expect(await first.stop()).toBe(0)

    const second = await startServerProcess({ DATA_DIR: dir })
    expect(second.output()).not.toContain("admin password:")
    expect(second.output()).not.toContain("application key:")
    const again = await fetch(`http://127.0.0.1:${second.port}/v1/whoami`, { headers: { authorization: `Bearer ${key}` } })
    expect(again.status).toBe(200)
    await second.stop()
    // Two processes, the first creating an on-disk PGlite: slow on a loaded 2-core machine.
  }, 120_000)

  const oneLine = (stderr: string) => stderr.trim().split("\n").filter((l) => !/^npm warn/.test(l))

  it("stops with one line naming a malformed variable", async () => {
    const exited = await runServerToExit({ DATABASE_URL: "memory://", PORT: "eighty" })
    expect(exited.code).toBe(1)
    const lines = oneLine(exited.stderr)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^voltaic: invalid configuration: PORT: /)
  })

  it("stops with one line naming an out-of-range port", async () => {
    const exited = await runServerToExit({ DATABASE_URL: "memory://", PORT: "70000" })
    expect(exited.code).toBe(1)
    expect(oneLine(exited.stderr)).toEqual(["voltaic: invalid configuration: PORT: must be a port from 0 to 65535, or off; got 70000"])
  })

  it("stops with one line naming an unreachable DATABASE_URL", async () => {
    const exited = await runServerToExit({ DATABASE_URL: "postgres://postgres@127.0.0.1:1/nothing" })
    expect(exited.code).toBe(1)
    const lines = oneLine(exited.stderr)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^voltaic: DATABASE_URL: cannot reach the database/)
  })

  it("stops with one line when DATABASE_URL's server answers but is not PostgreSQL", async () => {
    // Another service's port: it answers every connection with bytes that are not the protocol.
    // A client that writes as the answer closes the socket resets it: this listener expects that.
    const impostor = createServer((socket) => {
      socket.on("error", () => undefined)
      socket.end("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
    })
    await new Promise<void>((resolve) => impostor.listen(0, "127.0.0.1", resolve))
    const address = impostor.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    try {
      const exited = await runServerToExit({ DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/x` })
      expect(exited.code).toBe(1)
      const lines = oneLine(exited.stderr)
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatch(/^voltaic: DATABASE_URL: cannot reach the database .*is it a PostgreSQL server\?/)
    } finally {
      impostor.close()
    }
  }, 60_000)

  it("stops with one line naming two listeners given one port, before binding either", async () => {
    const exited = await runServerToExit({ DATABASE_URL: "memory://", PORT: "18555", MQTT_PORT: "18555", MQTT_WS_PORT: "0", COAP_PORT: "0" })
    expect(exited.code).toBe(1)
    expect(oneLine(exited.stderr)).toEqual(["voltaic: MQTT_PORT: 18555 is PORT's port too: give each listener its own"])
  })

  it("stops with one line naming a port already in use", async () => {
    const blocker = createServer()
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve))
    const address = blocker.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    try {
      const exited = await runServerToExit({ DATABASE_URL: "memory://", PORT: String(port) })
      expect(exited.code).toBe(1)
      expect(oneLine(exited.stderr)).toEqual([`voltaic: PORT: 127.0.0.1:${port} is already in use`])
    } finally {
      blocker.close()
    }
  })

  it("refuses a BOOTSTRAP_APP_KEY without the a_sk_ prefix", async () => {
    const exited = await runServerToExit({ DATABASE_URL: "memory://", BOOTSTRAP_APP_KEY: "secret" })
    expect(exited.code).toBe(1)
    expect(oneLine(exited.stderr)).toEqual(["voltaic: invalid configuration: BOOTSTRAP_APP_KEY: must start with a_sk_"])
  })
})
