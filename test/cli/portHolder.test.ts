import { createServer } from "node:net"
import { describe, expect, it } from "vitest"
import { portHolder, shortCommand } from "../../src/cli/portHolder.ts"

describe("the command line doctor prints for a port's holder", () => {
  it("names the program by its file name and keeps short lines whole", () => {
    expect(shortCommand(["/usr/local/lib/nodejs/node-v24/bin/node", "--import", "tsx", "src/main.ts", ""])).toBe("node --import tsx src/main.ts")
    expect(shortCommand([])).toBe("")
  })

  it("cuts a long line in the middle, so the script at its end is still there", () => {
    const argv = ["/check/work/main/node_modules/node/bin/node", "--liftoff-only", "--max-old-space-size=4096", "--import", "tsx", "--enable-source-maps", "/check/work/main/src/main.ts"]
    const line = shortCommand(argv)
    expect(line).toHaveLength(80)
    expect(line.startsWith("node --liftoff-only")).toBe(true)
    expect(line.endsWith("/check/work/main/src/main.ts")).toBe(true)
    expect(line.split("…")).toHaveLength(2)
  })

  it("finds this process behind a TCP port it listens on", async () => {
    const server = createServer()
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    try {
      const address = server.address()
      if (address === null || typeof address === "string") throw new Error("no port")
      const holder = await portHolder(address.port, "tcp")
      expect(holder?.pid).toBe(process.pid)
      expect(holder?.command.length).toBeGreaterThan(0)
      expect(holder!.command.length).toBeLessThanOrEqual(80)
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})
