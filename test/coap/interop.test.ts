import { execFile } from "node:child_process"
import { accessSync, constants } from "node:fs"
import { delimiter, join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BOOTSTRAP_KEY } from "../support/app.ts"
import { type CoapTestApp, startCoapApp } from "../support/coap.ts"

/** libcoap's client: `coap-client` upstream; Debian's libcoap3-bin names it by TLS flavour. */
const CLIENT_NAMES = ["coap-client", "coap-client-notls", "coap-client-openssl", "coap-client-gnutls"]

const findClient = (): string | undefined => {
  for (const name of CLIENT_NAMES) {
    for (const dir of (process.env.PATH ?? "").split(delimiter)) {
      try {
        accessSync(join(dir, name), constants.X_OK)
        return join(dir, name)
      } catch {
        // not here
      }
    }
  }
  return undefined
}

const client = findClient()

/** Runs coap-client; its own timeout (-B) is below ours, so a hang fails instead of blocking. */
const coapClient = (args: ReadonlyArray<string>): Promise<{ stdout: string; stderr: string }> =>
  new Promise((resolve, reject) => {
    if (client === undefined) return reject(new Error("coap-client not installed"))
    execFile(client, ["-B", "5", ...args], { timeout: 10_000, encoding: "utf8" }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${client} ${args.join(" ")} failed: ${error.message}\n${stderr}`))
      else resolve({ stdout, stderr })
    })
  })

describe("interop with libcoap's coap-client (apt: libcoap3-bin)", () => {
  it("has a coap-client to test with (.ci/run installs libcoap3-bin)", () => {
    expect(client, `none of ${CLIENT_NAMES.join(", ")} is on PATH`).toBeDefined()
  })

  let t: CoapTestApp
  let deviceId: string
  let deviceKey: string
  const app = (method: string, path: string, body?: unknown) => t.call(method, path, { key: BOOTSTRAP_KEY, body })
  const url = (path: string) => `coap://127.0.0.1:${t.coapPort}${path}`

  beforeAll(async () => {
    t = await startCoapApp()
    const space = await app("POST", "/spaces", { name: "Site" })
    const device = await app("POST", "/devices", { name: "Meter", space: { id: space.body.id } })
    deviceId = device.body.id
    deviceKey = device.body.secretKey
  })
  afterAll(() => t?.close())

  it("stores an event posted with coap-client -m post -e", async () => {
    const payload = JSON.stringify({ accessToken: deviceKey, name: "interop", data: { v: 1 } })
    const { stdout } = await coapClient(["-m", "post", "-e", payload, url("/events")])
    const event = JSON.parse(stdout)
    expect(event).toMatchObject({ name: "interop", data: { v: 1 }, device: { id: deviceId } })
    expect((await app("GET", `/events/${event.id}`)).body).toEqual(event)
  })

  it("stores a location sent non-confirmable with Content-Format application/json", async () => {
    const payload = JSON.stringify({ accessToken: deviceKey, latitude: 48.85, longitude: 2.35 })
    const { stdout } = await coapClient(["-m", "post", "-N", "-t", "50", "-e", payload, url("/locations")])
    expect(JSON.parse(stdout)).toMatchObject({ latitude: "48.85", longitude: "2.35", device: { id: deviceId } })
  })

  it("stores an event larger than a block, which coap-client sends block-wise with a new token per block", async () => {
    const data = "z".repeat(3000)
    const { stdout } = await coapClient(["-m", "post", "-b", "256", "-e", JSON.stringify({ accessToken: deviceKey, name: "bulk", data }), url("/events")])
    const event = JSON.parse(stdout)
    expect(event.data).toBeUndefined()
    expect((await app("GET", `/events/${event.id}`)).body.data).toBe(data)
  })

  it("reports 4.05 for GET and 4.01 for an unknown key", async () => {
    expect((await coapClient(["-m", "get", url("/events")])).stderr).toMatch(/^4\.05 /)
    const bad = JSON.stringify({ accessToken: "d_sk_unknown", name: "x" })
    expect((await coapClient(["-m", "post", "-e", bad, url("/events")])).stderr).toMatch(/^4\.01 /)
  })
})
