import { PGlite } from "@electric-sql/pglite"
import { mkdtemp, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { durableDisk } from "../../src/store/pgliteDisk.ts"

let root: string
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "voltaic-pglite-disk-"))
})
afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe("PGlite on disk that survives a machine crash (pgliteDisk.ts)", () => {
  it("syncs the WAL to the disk at every commit, the data files at a checkpoint, and reopens with every row", async () => {
    const dataDir = join(root, "data")
    let syncs = 0
    const db = await PGlite.create(durableDisk(dataDir, () => syncs++))
    expect((await db.query<{ fsync: string }>("SHOW fsync")).rows).toEqual([{ fsync: "on" }])
    await db.exec("CREATE TABLE kept (n int8 PRIMARY KEY)")
    const beforeCommits = syncs
    for (let n = 0; n < 20; n++) await db.query("INSERT INTO kept VALUES ($1)", [n])
    // Each commit's WAL reached the disk before the commit was answered: a sync each.
    expect(syncs - beforeCommits).toBeGreaterThanOrEqual(20)
    // A read-only statement writes no WAL and syncs nothing.
    const beforeRead = syncs
    await db.query("SELECT count(*) FROM kept")
    expect(syncs).toBe(beforeRead)
    // A checkpoint syncs the data files it wrote (the table, its index, the catalogue).
    const beforeCheckpoint = syncs
    await db.exec("CHECKPOINT")
    expect(syncs - beforeCheckpoint).toBeGreaterThan(1)
    await db.close()
    const reopened = await PGlite.create(durableDisk(dataDir))
    expect((await reopened.query<{ n: number }>("SELECT count(*)::int AS n FROM kept")).rows).toEqual([{ n: 20 }])
    await reopened.close()
  })

  it("keeps every other start parameter of PGlite's", () => {
    const params = durableDisk(join(root, "unused")).startParams
    expect(params).not.toContain("-F")
    for (const param of PGlite.defaultStartParams.filter((p) => p !== "-F")) expect(params).toContain(param)
  })
})
