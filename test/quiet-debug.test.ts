import { execFile } from "node:child_process"
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"
import { type CreateDebug, quietWhenOff } from "../src/quietDebug.ts"

const run = promisify(execFile)
const require = createRequire(import.meta.url)

/** `debug` loggers that cost nothing when off, for mqtt-packet and coap (src/quietDebug.ts). */
describe("quiet debug loggers", () => {
  it("hands out debug's own logger for an enabled namespace, and a no-op for the rest", () => {
    const createDebug = require("debug") as CreateDebug & { enable(namespaces: string): void; disable(): string; log: (...args: Array<unknown>) => void }
    const previous = createDebug.disable()
    const logged: Array<string> = []
    const log = createDebug.log
    createDebug.log = (...args) => logged.push(args.map(String).join(" "))
    try {
      createDebug.enable("on:*")
      const quiet = quietWhenOff(createDebug)
      const on = quiet("on:parser") as ((...args: Array<unknown>) => void) & { enabled: boolean; extend(sub: string): { enabled: boolean } }
      const off = quiet("off:parser") as ((...args: Array<unknown>) => void) & { enabled: boolean; namespace: string; extend(sub: string): { enabled: boolean } }
      expect(on.enabled).toBe(true)
      expect(off.enabled).toBe(false)
      expect(off.namespace).toBe("off:parser")
      on("packet %d", 7)
      off("packet %d", 8)
      expect(logged).toHaveLength(1)
      expect(logged[0]).toMatch(/on:parser packet %d 7|on:parser packet 7/)
      // A sub-namespace is judged on its own name.
      expect(off.extend("x").enabled).toBe(false)
      expect((quiet("elsewhere") as { extend(sub: string): { enabled: boolean } }).extend("on").enabled).toBe(false)
      createDebug.enable("off:parser:deep")
      expect(off.extend("deep").enabled).toBe(true)
      // The factory's own fields are the package's.
      expect(quiet.enabled("off:parser:deep")).toBe(true)
    } finally {
      createDebug.log = log
      createDebug.enable(previous)
    }
  })

  it("is what mqtt-packet and coap get once the entry loaded it, and DEBUG still turns a namespace on", async () => {
    const entry = fileURLToPath(new URL("../src/quietDebug.ts", import.meta.url))
    const probe = `
      await import(${JSON.stringify(entry)})
      const { createRequire } = await import("node:module")
      const from = (file, request) => createRequire(file).resolve(request)
      const packet = from(from(${JSON.stringify(entry)}, "aedes"), "mqtt-packet")
      const mqtt = createRequire(packet)
      const coap = createRequire(from(${JSON.stringify(entry)}, "coap"))
      const parser = mqtt("mqtt-packet").parser()
      let packets = 0
      parser.on("packet", () => packets++)
      parser.parse(Buffer.from([0xc0, 0x00, 0xc0, 0x00]))
      // debug's own disabled logger wakes up on a later enable(); the stand-in stays quiet.
      const made = mqtt("debug")("mqtt-packet:later")
      mqtt("debug").enable([process.env.DEBUG, "mqtt-packet:later"].filter(Boolean).join(","))
      console.log(JSON.stringify({
        standIn: !made.enabled,
        packets,
        parser: mqtt("debug")("mqtt-packet:parser").enabled,
        writer: mqtt("debug")("mqtt-packet:writeToStream").enabled,
        coap: coap("debug")("CoAP:Server").enabled
      }))`
    const probeWith = async (debug: string | undefined) => {
      const env = { ...process.env }
      delete env.DEBUG
      if (debug !== undefined) env.DEBUG = debug
      const { stdout, stderr } = await run(process.execPath, ["--import", "tsx", "--input-type=module", "-e", probe], { env })
      return { result: JSON.parse(stdout.trim().split("\n").at(-1)!), stderr }
    }
    const off = await probeWith(undefined)
    expect(off.result).toEqual({ standIn: true, packets: 2, parser: false, writer: false, coap: false })
    expect(off.stderr).toBe("")
    const on = await probeWith("mqtt-packet:parser")
    expect(on.result).toEqual({ standIn: true, packets: 2, parser: true, writer: false, coap: false })
    // The parser logged the two PINGREQs it read.
    expect(on.stderr).toContain("mqtt-packet:parser")
  })
})
