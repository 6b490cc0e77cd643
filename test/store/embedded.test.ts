import { spawnSync } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createHash } from "node:crypto"
import { type EmbeddedDb, openEmbedded, workerFlags } from "../../src/store/embedded.ts"
import { initdbTemplate, keptForOpens, pgliteArtifacts, templateTar } from "../../src/store/pgliteFiles.ts"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))

let root: string
let db: EmbeddedDb
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "voltaic-embedded-"))
  db = await openEmbedded(undefined)
  await db.exec("CREATE TABLE things (id text PRIMARY KEY, n int8 NOT NULL, amount numeric, doc jsonb, raw bytea)")
})
afterAll(async () => {
  await db.close()
  await rm(root, { recursive: true, force: true })
})

/** The failure a promise rejected with. */
const failure = async (promise: Promise<unknown>): Promise<Error & Record<string, unknown>> => {
  try {
    await promise
  } catch (cause) {
    if (cause instanceof Error) return cause as Error & Record<string, unknown>
    throw new Error(`rejected with a non-Error: ${String(cause)}`)
  }
  throw new Error("expected a rejection")
}

describe("PGlite on its own thread", () => {
  it("answers parameterised statements with the types PGlite parses, as objects or arrays", async () => {
    await db.query("INSERT INTO things VALUES ($1, $2, $3, $4, $5)", ["a", 41, "1.25", { on: true, tags: ["x"] }, new Uint8Array([1, 2, 255])])
    const result = await db.query<{ id: string; n: number; amount: string; doc: unknown; raw: Uint8Array }>(
      "UPDATE things SET n = n + 1 WHERE id = $1 RETURNING *",
      ["a"]
    )
    expect(result.affectedRows).toBe(1)
    expect(result.command).toBe("UPDATE")
    expect(result.rows).toEqual([{ id: "a", n: 42, amount: "1.25", doc: { on: true, tags: ["x"] }, raw: new Uint8Array([1, 2, 255]) }])
    const arrays = await db.query<Array<unknown>>("SELECT id, n FROM things WHERE id = $1", ["a"], { rowMode: "array" })
    expect(arrays.rows).toEqual([["a", 42]])
    expect(arrays.fields.map((f) => f.name)).toEqual(["id", "n"])
  })

  it("creates WAL segments without zero-filling them first (a 16 MB fill stalled the statement crossing into one)", async () => {
    expect((await db.query<{ wal_init_zero: string }>("SHOW wal_init_zero")).rows).toEqual([{ wal_init_zero: "off" }])
  })

  it("rejects a failed statement with the database's code and fields, and goes on serving", async () => {
    const error = await failure(db.query("INSERT INTO things (id, n) VALUES ($1, $2)", ["a", 1]))
    expect(error.message).toMatch(/duplicate key value violates unique constraint/)
    expect(error.code).toBe("23505")
    expect(error.constraint).toBe("things_pkey")
    expect(error.table).toBe("things")
    const syntax = await failure(db.exec("SELEC 1"))
    expect(syntax.code).toBe("42601")
    expect((await db.query<{ n: number }>("SELECT n FROM things WHERE id = 'a'")).rows).toEqual([{ n: 42 }])
  })

  it("commits a transaction whose body resolves and rolls back one whose body rejects, with the body's own failure", async () => {
    const value = await db.transaction(async (tx) => {
      await tx.query("INSERT INTO things (id, n) VALUES ('b', 1)")
      await tx.exec("UPDATE things SET n = 2 WHERE id = 'b'")
      return "kept"
    })
    expect(value).toBe("kept")
    const mine = new Error("the body gave up")
    const thrown = await failure(db.transaction(async (tx) => {
      await tx.query("INSERT INTO things (id, n) VALUES ('c', 1)")
      await tx.query("UPDATE things SET n = 99 WHERE id = 'b'")
      throw mine
    }))
    expect(thrown).toBe(mine)
    // A failed statement inside rolls the whole transaction back too.
    const duplicate = await failure(db.transaction(async (tx) => {
      await tx.query("INSERT INTO things (id, n) VALUES ('d', 1)")
      await tx.query("INSERT INTO things (id, n) VALUES ('b', 1)")
    }))
    expect(duplicate.code).toBe("23505")
    expect((await db.query("SELECT id, n FROM things WHERE id IN ('b', 'c', 'd') ORDER BY id")).rows).toEqual([{ id: "b", n: 2 }])
  })

  it("runs a statement sent during a transaction after it ends, as PGlite does in-thread", async () => {
    let outside: Promise<{ rows: Array<{ n: number }> }> | undefined
    await db.transaction(async (tx) => {
      await tx.query("UPDATE things SET n = 3 WHERE id = 'b'")
      outside = db.query<{ n: number }>("SELECT n FROM things WHERE id = 'b'")
      await tx.query("UPDATE things SET n = 4 WHERE id = 'b'")
    })
    expect((await outside)?.rows).toEqual([{ n: 4 }])
  })

  it("runs a write prepared once per text, keeps it through its failures, and not one that failed to prepare", async () => {
    const insert = "INSERT INTO things (id, n, doc) SELECT u.id, u.n, u.doc FROM jsonb_to_recordset($1::text::jsonb) AS u(id text, n int8, doc jsonb)"
    const preparedCount = async () =>
      (await db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement = $1", [insert])).rows[0].n
    await db.write(insert, [JSON.stringify([{ id: "w1", n: 1, doc: { a: 1 } }, { id: "w2", n: 2, doc: null }])])
    await db.write(insert, [JSON.stringify([{ id: "w3", n: 3 }])])
    expect(await preparedCount()).toBe(1)
    const duplicate = await failure(db.write(insert, [JSON.stringify([{ id: "w1", n: 9 }])]))
    expect(duplicate.code).toBe("23505")
    expect(duplicate.constraint).toBe("things_pkey")
    await db.write(insert, [JSON.stringify([{ id: "w4", n: 4 }])])
    expect(await preparedCount()).toBe(1)
    expect((await db.query("SELECT id, n, doc FROM things WHERE id LIKE 'w%' ORDER BY id")).rows).toEqual([
      { id: "w1", n: 1, doc: { a: 1 } },
      { id: "w2", n: 2, doc: null },
      { id: "w3", n: 3, doc: null },
      { id: "w4", n: 4, doc: null }
    ])
    const broken = "INSERT INTO things (id, n) SELEC $1, 1"
    expect((await failure(db.write(broken, ["x"]))).code).toBe("42601")
    expect((await failure(db.write(broken, ["x"]))).code).toBe("42601")
    expect((await db.query("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement = $1", [broken])).rows).toEqual([{ n: 0 }])
    // A script's step with text parameters runs prepared too.
    const update = "UPDATE things SET n = n + 100 WHERE id = $1"
    await db.script([{ text: update, params: ["w4"] }, { text: update, params: ["w3"] }])
    expect((await db.query("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement = $1", [update])).rows).toEqual([{ n: 1 }])
    expect((await db.query("SELECT id, n FROM things WHERE id IN ('w3', 'w4') ORDER BY id")).rows).toEqual([{ id: "w3", n: 103 }, { id: "w4", n: 104 }])
  })

  it("keeps at most 64 statements prepared, and runs writes of further texts all the same", async () => {
    for (let k = 0; k < 80; k++) await db.write(`INSERT INTO things (id, n) VALUES ($1, ${k})`, [`many-${k}`])
    const [kept] = (await db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'voltaic_write_%'")).rows
    expect(kept.n).toBe(64)
    expect((await db.query<{ n: number }>("SELECT count(*)::int AS n FROM things WHERE id LIKE 'many-%'")).rows).toEqual([{ n: 80 }])
  })

  it("runs a write sent during a transaction after it ends, and one inside a transaction with it", async () => {
    const insert = "INSERT INTO things (id, n) VALUES ($1, 1)"
    let outside: Promise<void> | undefined
    const mine = new Error("rolled back")
    const thrown = await failure(db.transaction(async (tx) => {
      await tx.write(insert, ["t-in"])
      outside = db.write(insert, ["t-out"])
      // Long enough for the write sent outside to run, were it not held until the transaction ends.
      await tx.query("SELECT pg_sleep(0.1)")
      throw mine
    }))
    expect(thrown).toBe(mine)
    await outside
    expect((await db.query("SELECT id FROM things WHERE id LIKE 't-%' ORDER BY id")).rows).toEqual([{ id: "t-out" }])
  })

  it("keeps this thread's event loop turning while a long statement runs", async () => {
    let last = performance.now()
    let widest = 0
    const ticker = setInterval(() => {
      const now = performance.now()
      widest = Math.max(widest, now - last)
      last = now
    }, 1)
    const started = performance.now()
    await db.query("SELECT count(*) FROM generate_series(1, 3000000) AS g(i) WHERE i % 7 = 3")
    const ended = performance.now()
    clearInterval(ticker)
    const took = ended - started
    widest = Math.max(widest, ended - last)
    // In-thread, the statement's whole run would be one gap between two ticks.
    expect(widest).toBeLessThan(took / 2)
  })

  it("keeps its rows in a data directory across a close and a new open", async () => {
    const dataDir = join(root, "data")
    const first = await openEmbedded(dataDir)
    await first.exec("CREATE TABLE kept (v text)")
    await first.query("INSERT INTO kept VALUES ($1)", ["across a restart"])
    await first.close()
    expect(await failure(first.query("SELECT 1"))).toHaveProperty("message", "the embedded database is closed")
    const second = await openEmbedded(dataDir)
    expect((await second.query("SELECT v FROM kept")).rows).toEqual([{ v: "across a restart" }])
    await second.close()
  })

  it("on disk, syncs to the disk: fsync on, the WAL synced by fsync, made from the template or by initdb", async () => {
    const settings = async (opened: EmbeddedDb) =>
      (await opened.query<{ fsync: string; method: string; buffers: string }>(
        "SELECT current_setting('fsync') AS fsync, current_setting('wal_sync_method') AS method, current_setting('shared_buffers') AS buffers"
      )).rows
    const fromTemplate = await openEmbedded(join(root, "synced-template"), join(root, "synced-cache", "initdb.tar"))
    expect(await settings(fromTemplate)).toEqual([{ fsync: "on", method: "fsync", buffers: "128MB" }])
    await fromTemplate.close()
    const byInitdb = await openEmbedded(join(root, "synced-initdb"), null)
    expect(await settings(byInitdb)).toEqual([{ fsync: "on", method: "fsync", buffers: "128MB" }])
    await byInitdb.close()
    // In memory there is no disk to sync: PGlite's own settings; and a smaller buffer cache over
    // files that are in memory already (Emscripten zero-fills the cache at every start).
    expect(await settings(db)).toEqual([{ fsync: "off", method: "fdatasync", buffers: "16MB" }])
  })

  it("reads a template once while its file stays the same, and again once it is replaced or changed", async () => {
    const file = join(root, "read-once", "initdb.tar")
    await mkdir(join(root, "read-once"))
    const write = (tar: Buffer) => writeFile(file, Buffer.concat([tar, createHash("sha256").update(tar).digest()]))
    await write(Buffer.from("first tar"))
    const first = templateTar(file)
    expect(first === undefined ? undefined : Buffer.from(first).toString()).toBe("first tar")
    expect(templateTar(file)).toBe(first)
    await write(Buffer.from("second tar, longer"))
    const second = templateTar(file)
    expect(second).not.toBe(first)
    expect(second === undefined ? undefined : Buffer.from(second).toString()).toBe("second tar, longer")
    // The same length and a digest that does not match: changed, and not used.
    const damaged = readFileSync(file)
    damaged[0] ^= 0xff
    await writeFile(file, damaged)
    expect(templateTar(file)).toBeUndefined()
    expect(templateTar(join(root, "read-once", "none.tar"))).toBeUndefined()
  })

  it("drops the template and PGlite's artifacts once no open used them for a while (a server opens one database)", async () => {
    const file = join(root, "kept", "initdb.tar")
    await mkdir(join(root, "kept"))
    const tar = Buffer.from("kept tar")
    await writeFile(file, Buffer.concat([tar, createHash("sha256").update(tar).digest()]))
    const kept = keptForOpens.ms
    keptForOpens.ms = 50
    try {
      const first = templateTar(file)
      const artifacts = await pgliteArtifacts()
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(templateTar(file)).toBe(first)
      await new Promise((resolve) => setTimeout(resolve, 200))
      const again = templateTar(file)
      expect(again).not.toBe(first)
      expect(again === undefined ? undefined : Buffer.from(again).toString()).toBe("kept tar")
      expect(await pgliteArtifacts()).not.toBe(artifacts)
    } finally {
      keptForOpens.ms = kept
    }
  })

  it("compiles PGlite's wasm and reads its file bundle once for a run of opens, for every database they make", async () => {
    const artifacts = await pgliteArtifacts()
    expect(artifacts).toBeDefined()
    expect(await pgliteArtifacts()).toBe(artifacts)
    if (artifacts === undefined) return
    const exported = (module: WebAssembly.Module) => WebAssembly.Module.exports(module).map((entry) => entry.name)
    expect(exported(artifacts.pglite)).toContain("ProcessStartupPacket")
    expect(exported(artifacts.initdb)).not.toContain("ProcessStartupPacket")
    const bundle = readFileSync(fileURLToPath(new URL("pglite.data", import.meta.resolve("@electric-sql/pglite"))))
    expect(Buffer.from(artifacts.bundle).equals(bundle)).toBe(true)
  })

  it("makes a new database from the initdb template once one is kept, in memory and on disk; a damaged one is not used", async () => {
    const template = join(root, "cache", "initdb.tar")
    const first = await openEmbedded(undefined, template)
    expect(first.origin).toBe("initdb")
    expect(existsSync(template)).toBe(true)
    // Dumped before anything was in it: what comes later in the first stays out of the next.
    await first.exec("CREATE TABLE leftover (n int)")
    await first.close()

    const second = await openEmbedded(undefined, template)
    try {
      expect(second.origin).toBe("template")
      expect((await second.query("SELECT to_regclass('leftover') AS t")).rows).toEqual([{ t: null }])
      await second.exec("CREATE TABLE fresh (n int); INSERT INTO fresh VALUES (7)")
      expect((await second.query("SELECT n FROM fresh")).rows).toEqual([{ n: 7 }])
    } finally {
      await second.close()
    }

    // On disk, beside the lock file a server keeps there, which the template leaves alone.
    const dataDir = join(root, "from-template")
    await mkdir(dataDir)
    await writeFile(join(dataDir, "voltaic.lock"), "held by this test")
    const onDisk = await openEmbedded(dataDir, template)
    expect(onDisk.origin).toBe("template")
    await onDisk.exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")
    await onDisk.close()
    const again = await openEmbedded(dataDir, template)
    try {
      expect(again.origin).toBe("existing")
      expect((await again.query("SELECT n FROM kept")).rows).toEqual([{ n: 42 }])
      expect(readFileSync(join(dataDir, "voltaic.lock"), "utf8")).toBe("held by this test")
    } finally {
      await again.close()
    }

    // One byte changed: its digest no longer matches, so initdb makes the database and a new template.
    const bytes = readFileSync(template)
    bytes[Math.floor(bytes.length / 2)] ^= 0xff
    await writeFile(template, bytes)
    const damaged = await openEmbedded(undefined, template)
    await damaged.close()
    expect(damaged.origin).toBe("initdb")
    const repaired = await openEmbedded(undefined, template)
    await repaired.close()
    expect(repaired.origin).toBe("template")
  }, 60_000)

  it("keeps the initdb template in node_modules/.cache, named by PGlite's version", () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, "node_modules/@electric-sql/pglite/package.json"), "utf8")) as { version: string }
    expect(initdbTemplate()).toBe(join(ROOT, "node_modules", ".cache", "voltaic", `pglite-${version}-initdb.tar`))
  })

  it("fails to open where no database can be made, saying why", async () => {
    const notADirectory = join(root, "a-file")
    await writeFile(notADirectory, "not a database")
    const error = await failure(openEmbedded(notADirectory))
    expect(error.message).not.toBe("")
  })

  it("starts its thread with the process's module-loading flags only", () => {
    expect(workerFlags([
      "--max-semi-space-size=64", "--require", "/x/preflight.cjs", "--heap-growing-percent=100", "--import", "file:///x/loader.mjs",
      "--input-type=module", "--conditions=development", "--enable-source-maps", "--cpu-prof"
    ])).toEqual(["--require", "/x/preflight.cjs", "--import", "file:///x/loader.mjs", "--conditions=development", "--enable-source-maps"])
  })

  it("holds the process open while an answer is awaited, and not once it is idle", () => {
    // No close: the process must still get its answer, then exit by itself.
    const script = [
      `const { openEmbedded } = await import(${JSON.stringify(join(ROOT, "src/store/embedded.ts"))})`,
      `const db = await openEmbedded(undefined)`,
      `const { rows } = await db.query("SELECT 40 + 2 AS answer")`,
      `console.log(rows[0].answer)`
    ].join("\n")
    // With `npm start`'s heap flags and `node -e`'s --input-type, which a worker refuses to inherit.
    const heapFlags = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { config: { nodeFlags: string } }).config.nodeFlags.split(" ")
    expect(heapFlags.length).toBeGreaterThan(0)
    const child = spawnSync(process.execPath, [...heapFlags, "--import", "tsx", "--input-type=module", "-e", script], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000
    })
    expect(child.signal).toBeNull()
    expect({ status: child.status, stdout: child.stdout.trim() }).toEqual({ status: 0, stdout: "42" })
  })
  it("keeps wasm-to-JS wrappers generic: V8's swap to a compiled wrapper, after 1,000 calls, is where it crashed", () => {
    // V8 traces each compile. PGlite's start and 100 inserts call several of its imports over
    // 1,000 times each: without keepWasmWrappersGeneric this run compiled 14 such wrappers.
    const script = [
      `const { openEmbedded } = await import(${JSON.stringify(join(ROOT, "src/store/embedded.ts"))})`,
      `const db = await openEmbedded(undefined)`,
      `await db.exec("CREATE TABLE t (n int8)")`,
      `for (let i = 0; i < 100; i++) await db.query("INSERT INTO t VALUES ($1)", [i])`,
      `const { rows } = await db.query("SELECT count(*)::int AS n FROM t")`,
      `await db.close()`,
      `console.log("rows", rows[0].n)`
    ].join("\n")
    const child = spawnSync(process.execPath, ["--trace-wasm-compilation-times", "--import", "tsx", "--input-type=module", "-e", script], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000,
      maxBuffer: 64 * 1024 * 1024
    })
    expect(child.signal).toBeNull()
    // V8 prints from its threads through C's buffered stdout, which interleaves with Node's writes.
    expect(child.stdout).toContain("rows 100")
    expect(child.stdout.match(/Compiled function/g)?.length).toBeGreaterThan(100)
    expect(child.stdout.match(/Compiled WasmToJS wrapper[^\n]*/g) ?? []).toEqual([])
  }, 60_000)
})
