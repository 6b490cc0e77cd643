import { Context, Effect, Exit, Layer, Scope } from "effect"
import { mkdtempSync } from "node:fs"
import { Sql } from "/work/main/src/store/Sql.ts"
import { migrate } from "/work/main/src/store/migrate.ts"
const scope = await Effect.runPromise(Scope.make())
const sql = Context.get(await Effect.runPromise(Layer.buildWithScope(Sql.layer({ _tag: "pglite", dataDir: mkdtempSync("/tmp/anl-") }), scope)), Sql)
const run = <A>(e: Effect.Effect<A, unknown>) => Effect.runPromise(e)
await run(Effect.provideService(migrate, Sql, sql))
await run(sql.exec(`INSERT INTO organisations (id, name, created_at, updated_at) VALUES ('org_a', 'a', 1, 1);
  INSERT INTO devices (id, organisation_id, secret_hash, name, created_at, updated_at) SELECT 'dev_' || g, 'org_a', 'h' || g, 'd' || g, 1, 1 FROM generate_series(1, 1000) g;`))
const N = Number(process.env.N ?? 300000)
for (let b = 0; b < N / 50000; b++) {
  let text = ""
  for (let i = 0; i < 50000; i++) { const n = b * 50000 + i; text += `evt_${String(n).padStart(20, "0")}\torg_a\tdev_${(n % 1000) + 1}\t${["temperature", "humidity", "power"][n % 3]}\t{"value":${(n % 400) / 10},"unit":"C"}\t${1700000000000 + n}\t${1700000000000 + n}\tmqtt\n` }
  await run(sql.script([{ copy: "COPY events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol) FROM STDIN", data: text }]))
}
const time = async (what: string) => { const t = performance.now(); await run(sql.exec(what)); return (performance.now() - t).toFixed(0) }
console.log("vacuum", await time("VACUUM events"))
const plans = async (label: string) => {
  const qs = [
    "SELECT e.id FROM events e LEFT JOIN event_files f ON f.event_id = e.id AND e.has_file WHERE e.organisation_id = 'org_a' AND e.device_id = 'dev_7' ORDER BY e.timestamp DESC, e.id DESC LIMIT 101",
    "SELECT e.id FROM events e WHERE e.organisation_id = 'org_a' AND e.device_id = 'dev_7' AND e.name = 'power' AND e.timestamp > 1700000100000 ORDER BY e.timestamp, e.id LIMIT 101",
    "SELECT count(*) FROM events e WHERE e.organisation_id = 'org_a' AND e.device_id = 'dev_7'",
    "SELECT e.id FROM events e WHERE e.organisation_id = 'org_a' ORDER BY e.timestamp DESC, e.id DESC LIMIT 101"
  ]
  for (const q of qs) {
    const t = performance.now()
    const r = await run(sql.query<Record<string, string>>("EXPLAIN " + q))
    await run(sql.query(q))
    console.log(label, (performance.now() - t).toFixed(1), "ms |", r.map((x) => Object.values(x)[0]).filter((l) => /Scan|Sort|Limit/.test(l)).map((l) => l.trim().slice(0, 90)).join(" / "))
  }
}
console.log("analyze default", await time("ANALYZE events"))
await plans("default")
await run(sql.exec("ALTER TABLE events ALTER COLUMN data SET STATISTICS 0, ALTER COLUMN id SET STATISTICS 0, ALTER COLUMN received_at SET STATISTICS 0, ALTER COLUMN protocol SET STATISTICS 0, ALTER COLUMN organisation_id SET STATISTICS 10, ALTER COLUMN has_file SET STATISTICS 10, ALTER COLUMN device_id SET STATISTICS 10, ALTER COLUMN name SET STATISTICS 10, ALTER COLUMN timestamp SET STATISTICS 10"))
for (let i = 0; i < 2; i++) console.log("analyze 10", await time("ANALYZE events"))
await plans("target10")
await Effect.runPromise(Scope.close(scope, Exit.void))
