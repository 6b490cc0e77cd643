import { existsSync } from "node:fs"
import { mkdtemp, rm } from "node:fs/promises"
import { createSocket } from "node:dgram"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runServerToExit, startServerProcess } from "./support/process.ts"

let dataDir: string
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "voltaic-order-"))
})
afterAll(() => rm(dataDir, { recursive: true, force: true }))

const holdTcp = async (): Promise<{ port: number; server: Server }> => {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address()
  return { port: typeof address === "object" && address !== null ? address.port : 0, server }
}

const holdUdp = async () => {
  const socket = createSocket("udp4")
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve))
  return { port: socket.address().port, close: () => new Promise<void>((resolve) => socket.close(() => resolve())) }
}

const stderrLines = (stderr: string) => stderr.trim().split("\n").filter((l) => !/^npm warn/.test(l))

describe("a start on ports in use", () => {
  it("names every clash in one line, creates nothing, and the next start on free ports prints the first secrets", async () => {
    const dir = join(dataDir, "ports")
    const [http, mqtt, mqttWs] = [await holdTcp(), await holdTcp(), await holdTcp()]
    const coap = await holdUdp()
    try {
      const exited = await runServerToExit({
        DATA_DIR: dir,
        PORT: String(http.port),
        MQTT_PORT: String(mqtt.port),
        MQTT_WS_PORT: String(mqttWs.port),
        COAP_PORT: String(coap.port)
      })
      expect(exited.code).toBe(1)
      expect(stderrLines(exited.stderr)).toEqual([
        `voltaic: PORT: 127.0.0.1:${http.port} is already in use; ` +
        `MQTT_PORT: 127.0.0.1:${mqtt.port} is already in use; ` +
        `MQTT_WS_PORT: 127.0.0.1:${mqttWs.port} is already in use; ` +
        `COAP_PORT: 127.0.0.1:${coap.port} is already in use`
      ])
      expect(exited.stdout).not.toContain("admin password:")
      // The store was never opened: no data directory, no organisation.
      expect(existsSync(dir)).toBe(false)

      // One port taken is reported alone, and still nothing is created.
      const one = await runServerToExit({ DATA_DIR: dir, MQTT_WS_PORT: String(mqttWs.port) })
      expect(stderrLines(one.stderr)).toEqual([`voltaic: MQTT_WS_PORT: 127.0.0.1:${mqttWs.port} is already in use`])
      expect(existsSync(dir)).toBe(false)
    } finally {
      for (const held of [http, mqtt, mqttWs]) held.server.close()
      await coap.close()
    }

    const started = await startServerProcess({ DATA_DIR: dir })
    try {
      expect(started.output()).toContain("admin password:")
      expect(started.output()).toMatch(/application key:\s+a_sk_/)
    } finally {
      expect(await started.stop()).toBe(0)
    }
  }, 120_000)
})
