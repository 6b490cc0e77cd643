import { createServer } from "node:net"
import { describe, expect, it } from "vitest"
import { spawnCliStart, startServerProcess } from "../support/process.ts"

const tcpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

describe("voltaic start", () => {
  it("serves as src/main.ts does, and SIGINT drains and stops it with exit code 0", async () => {
    const server = await startServerProcess({ DATABASE_URL: "memory://" }, 60_000, spawnCliStart)
    expect((await fetch(`http://127.0.0.1:${server.port}/v1/health`)).status).toBe(200)
    expect(server.output()).toContain("application key:")
    expect(await server.stop("SIGINT")).toBe(0)
    for (const port of [server.port, server.mqttPort, server.mqttWsPort]) expect(await tcpFree(port)).toBe(true)
  }, 90_000)
})
