import { writeFile } from "node:fs/promises"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { makeStores, printed, stderrLines } from "../support/cli.ts"
import { runCli, type ServerProcess, startServerProcess } from "../support/process.ts"

const stores = makeStores()
afterAll(() => stores.cleanup())

const JANUARY = Date.parse("2025-01-01T00:00:00Z")
const MINUTE = 60_000
/**
 * More rows than one HTTP import takes on Postgres; on PGlite, slower to write, a tenth in
 * batches a tenth the size: as many batches either way.
 */
const SIZES = { postgres: { rows: 120_000, batch: 10_000 }, pglite: { rows: 12_000, batch: 1_000 } } as const

/** A space and `n` devices in it, over REST with the first start's application key. */
const createDevices = async (server: ServerProcess, key: string, n: number): Promise<Array<string>> => {
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" }
  const post = async (path: string, body: object) => {
    const res = await fetch(`http://127.0.0.1:${server.port}/v1${path}`, { method: "POST", headers, body: JSON.stringify(body) })
    expect(res.status).toBe(200)
    return (await res.json()) as { id: string }
  }
  const space = await post("/spaces", { name: "Plant" })
  const ids: Array<string> = []
  for (let i = 0; i < n; i++) ids.push((await post("/devices", { name: `Meter ${i}`, space: { id: space.id } })).id)
  return ids
}

/**
 * Row i, a minute after row i − 1, cycles through three devices: two send consumption
 * (`value` 0.25), the third its register (`meter`, 0.5 more each time; the first sets the
 * baseline). n rows: n/3 a device, n − 1 stored, 1 baseline, (n/3)·0.5 + (n/3 − 1)·0.5 kWh.
 */
const row = (devices: Array<string>, i: number) => {
  const timestamp = JANUARY + i * MINUTE
  return i % 3 === 2
    ? { device: { id: devices[2] }, timestamp, meter: ((i - 2) / 3) * 0.5 }
    : { device: devices[i % 3], timestamp: new Date(timestamp).toISOString(), value: 0.25 }
}

const ndjson = (rows: Array<object>) => rows.map((r) => JSON.stringify(r)).join("\n") + "\n"

/** The organisation's electricity in one quarter of 2025 (its first month), with the device breakdown, over REST. */
const quarter = async (server: ServerProcess, key: string, first = "01") => {
  const since = `2025-${first}-01T00:00:00Z`
  const until = `2025-${String(Number(first) + 3).padStart(2, "0")}-01T00:00:00Z`
  const res = await fetch(
    `http://127.0.0.1:${server.port}/v1/energy/electricity?since=${since}&until=${until}&interval=3%20months&breakdown=device`,
    { headers: { authorization: `Bearer ${key}` } }
  )
  expect(res.status).toBe(200)
  const body = (await res.json()) as { result: Array<{ energy: string }>; devices: Record<string, Array<{ energy: string }>> }
  return { total: body.result.map((r) => Number(r.energy)), devices: Object.fromEntries(Object.entries(body.devices).map(([id, rs]) => [id, Number(rs[0].energy)])) }
}

describe.each(["pglite", "postgres"] as const)("voltaic import energy on %s", (kind) => {
  const { rows: ROWS, batch } = SIZES[kind]
  const count = (n: number) => n.toLocaleString("en-US")
  it(`imports ${count(ROWS)} NDJSON rows in batches of ${count(batch)}; a bad line stops an import with nothing imported${kind === "postgres" ? ", a signal with the count said" : ""}`, async () => {
    const env = await stores.env(kind, "import")
    const dir = await stores.dir()
    let server = await startServerProcess(env)
    try {
      const key = printed(server.output(), "application key")
      const devices = await createDevices(server, key, 3)
      // PGlite is one process's: the server stops first. On Postgres it runs on, as in a cluster.
      if (kind === "pglite") {
        // Before it stops, doctor names it: on its HTTP port, and holding DATA_DIR (left unopened).
        const ports = { HOST: "127.0.0.1", PORT: String(server.port), MQTT_PORT: "0", MQTT_WS_PORT: "0", COAP_PORT: "0" }
        const doctor = await runCli(["doctor"], { ...env, ...ports })
        expect(doctor.code).toBe(1)
        const lines = doctor.stdout.trim().split("\n")
        const pid = server.child.pid
        expect(lines).toContainEqual(
          expect.stringMatching(new RegExp(`^✗ PORT: 127\\.0\\.0\\.1:${server.port} is already in use by process ${pid} \\(.*dist/src/main\\.js\\)`))
        )
        expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^! database: PGlite in .+ is held by process ${pid} \\(voltaic server\\)`)))
        expect(stderrLines(doctor.stderr)).toEqual(["voltaic: 1 check failed (✗ above)"])
        expect(await server.stop()).toBe(0)
      }

      const file = join(dir, `readings-${kind}.ndjson`)
      await writeFile(file, ndjson(Array.from({ length: ROWS }, (_, i) => row(devices, i))))
      const imported = await runCli(["import", "energy", file, "--kind", "electricity", ...(kind === "pglite" ? ["--batch-size", String(batch)] : [])], env)
      expect(imported.code).toBe(0)
      expect(imported.stdout.trim()).toMatch(
        new RegExp(
          `^Imported ${count(ROWS)} electricity rows from readings-${kind}\\.ndjson into .+ \\(org_\\w+\\): ` +
            `${count(ROWS - 1)} readings stored, 1 meter baselines set, in [\\d.]+ s \\([\\d,]+ rows/s\\)\\.$`
        )
      )
      // Not a terminal: progress, if the import took long enough for any, is plain lines.
      for (const line of stderrLines(imported.stderr)) expect(line).toMatch(/^(checking|importing): [\d.,]+/)

      // Line 2,501 of the next file is bad: nothing of it is imported, not even the 5 batches before it.
      const bad = join(dir, `bad-${kind}.ndjson`)
      const rows: Array<object> = Array.from({ length: 3_000 }, (_, i) => row(devices, ROWS + i))
      rows[2_500] = { device: devices[0], timestamp: "yesterday", value: 1 }
      await writeFile(bad, ndjson(rows))
      const refused = await runCli(["import", "energy", bad, "--kind", "electricity", "--batch-size", "500"], env)
      expect(refused.code).toBe(1)
      expect(refused.stdout).toBe("")
      expect(stderrLines(refused.stderr).filter((l) => l.startsWith("voltaic:"))).toEqual([
        `voltaic: bad-${kind}.ndjson line 2501: timestamp: must be epoch milliseconds or an ISO-8601 date-time; got "yesterday"; nothing was imported`
      ])

      if (kind === "pglite") server = await startServerProcess(env)
      else {
        // On Postgres (the same code on PGlite, slower to reach), a SIGTERM once it has imported for a while.
        // It says how many rows, exactly, and exits 130.
        const long = join(dir, `long-${kind}.ndjson`)
        const JULY = Date.parse("2025-07-01T00:00:00Z")
        await writeFile(long, ndjson(Array.from({ length: 300_000 }, (_, i) => ({ device: devices[0], timestamp: JULY + i * 1000, value: 1 }))))
        // Signalled once some of it is in the store, as the server answers it: not on its first progress
        // line, which comes after 2 s, when a fast machine may have imported the whole file.
        const stopped = await runCli(["import", "energy", long, "--kind", "electricity", "--batch-size", "1000"], env, 60_000, undefined, (child) => {
          const watch = async () => {
            while (child.exitCode === null && child.signalCode === null) {
              if ((await quarter(server, key, "07")).devices[devices[0]] > 0) {
                child.kill("SIGTERM")
                return
              }
              await new Promise((r) => setTimeout(r, 20))
            }
          }
          watch().catch(() => undefined)
        })
        expect(stopped.code).toBe(130)
        expect(stopped.stdout).toBe("")
        const said = /^voltaic: interrupted: the ([\d,]+) rows through line (\d+) were imported, the rest not$/m.exec(stopped.stderr)
        expect(said, stopped.stderr).not.toBeNull()
        const partial = Number(said![1].replaceAll(",", ""))
        expect(partial).toBeGreaterThan(0)
        expect(partial).toBeLessThan(300_000)
        expect(Number(said![2])).toBe(partial)
        expect((await quarter(server, key, "07")).devices).toEqual({ [devices[0]]: partial, [devices[1]]: 0, [devices[2]]: 0 })
      }
      const figures = await quarter(server, key)
      const perDevice = ROWS / 3
      expect(figures.total).toEqual([perDevice * 0.25 * 2 + (perDevice - 1) * 0.5])
      expect(figures.devices).toEqual({ [devices[0]]: perDevice * 0.25, [devices[1]]: perDevice * 0.25, [devices[2]]: (perDevice - 1) * 0.5 })
    } finally {
      expect(await server.stop()).toBe(0)
    }
  }, 120_000)
})
