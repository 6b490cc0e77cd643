/**
 * Which server process owns which shard, for `npm run bench:cluster` (bench/cluster.ts).
 *
 * On Postgres, effect/cluster's `SqlRunnerStorage` holds a shard with a session advisory lock
 * (`pg_try_advisory_lock(namespace, 1_000_000 + shard)` on a reserved connection of the runner's
 * pool), not with a row of `cluster_locks` (that table is used only without advisory locks, e.g.
 * on PGlite, or with `shardLockDisableAdvisory`: read then instead); runners register in `cluster_runners`. So ownership is read from `pg_locks`, and
 * the backend holding a lock is traced to the server process through its socket: the backend's
 * `client_port` (pg_stat_activity) is the local port of one of the process's TCP sockets
 * (/proc/net/tcp*, /proc/<pid>/fd).
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import type { BenchDatabase } from "./harness.ts"

/** `SqlRunnerStorage`'s advisory-lock namespace for the default table prefix "cluster" (FNV-1a, as there). */
const lockNamespace = (prefix = "cluster") => {
  const bytes = new TextEncoder().encode(`effect-cluster:${prefix}`)
  let hash = 0x811c9dc5
  for (const byte of bytes) hash = Math.imul(hash ^ byte, 0x01000193)
  return (hash | 0) >>> 0
}

/** Shards per group (`ShardingConfig` default, which `src/cluster/Cluster.ts` keeps) in the one group "default". */
export const SHARDS = 300
const GROUP_BASE = 1_000_000

/** Inodes of the TCP sockets whose local port is `port` (IPv4 and IPv6 tables). */
const socketInodes = (port: number): Set<string> => {
  const inodes = new Set<string>()
  const hex = port.toString(16).toUpperCase().padStart(4, "0")
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = ""
    try {
      text = readFileSync(table, "utf8")
    } catch {
      continue
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/)
      if (fields.length > 9 && fields[1].endsWith(`:${hex}`)) inodes.add(fields[9])
    }
  }
  return inodes
}

/** Socket inodes open in process `pid`. */
const processSockets = (pid: number): Set<string> => {
  const inodes = new Set<string>()
  let fds: Array<string> = []
  try {
    fds = readdirSync(`/proc/${pid}/fd`)
  } catch {
    return inodes
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))
      if (m) inodes.add(m[1])
    } catch {
      // Closed meanwhile.
    }
  }
  return inodes
}

export interface Owners {
  /** Shard number (1…300) → the name of the process whose backend holds its lock ("?" when not traced). */
  readonly byShard: Map<number, string>
  /** Shards per process name. */
  readonly counts: Map<string, number>
}

/**
 * Reads the shard owners. `processes`: name → pid of the server processes; a lock held by a
 * backend whose client socket belongs to none of them is "?" (a process already dead).
 * Without advisory locks (`shardLockDisableAdvisory`), the leases in `cluster_locks` younger than
 * `lockExpiration` (an SQL interval) are read instead, their address "host:port" matched to the
 * processes' HTTP ports (`runnerPorts`: port → name).
 */
export const makeOwnerReader = (
  db: BenchDatabase,
  processes: () => ReadonlyMap<string, number>,
  runnerPorts: () => ReadonlyMap<number, string>,
  lockExpiration: string
) => {
  const namespace = lockNamespace()
  // Backend pid → process name, kept while the backend lives.
  const traced = new Map<number, string>()
  const trace = (clientPort: number | null): string => {
    if (clientPort === null) return "?"
    const inodes = socketInodes(clientPort)
    for (const [name, pid] of processes()) {
      for (const inode of processSockets(pid)) if (inodes.has(inode)) return name
    }
    return "?"
  }
  return async (): Promise<Owners> => {
    const rows = await db.query<{ objid: string; pid: number; client_port: number | null }>(
      `SELECT l.objid::text AS objid, l.pid, a.client_port
         FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::oid
          AND l.objid::bigint BETWEEN ${GROUP_BASE + 1} AND ${GROUP_BASE + SHARDS}`,
      [namespace]
    )
    const byShard = new Map<number, string>()
    const counts = new Map<string, number>()
    const own = (shard: number, name: string) => {
      byShard.set(shard, name)
      counts.set(name, (counts.get(name) ?? 0) + 1)
    }
    for (const row of rows) {
      let name = traced.get(row.pid)
      if (name === undefined || name === "?") {
        name = trace(row.client_port)
        traced.set(row.pid, name)
      }
      own(Number(row.objid) - GROUP_BASE, name)
    }
    if (rows.length === 0) {
      const leases = await db.query<{ shard_id: string; address: string }>(
        "SELECT shard_id, address FROM cluster_locks WHERE acquired_at >= now()::timestamp - $1::interval",
        [lockExpiration]
      )
      const ports = runnerPorts()
      for (const lease of leases) {
        const shard = /^default:(\d+)$/.exec(lease.shard_id)
        if (shard) own(Number(shard[1]), ports.get(Number(lease.address.slice(lease.address.lastIndexOf(":") + 1))) ?? "?")
      }
    }
    return { byShard, counts }
  }
}

/** The runners registered in `cluster_runners` (address, healthy, seconds since the last heartbeat). */
export const registeredRunners = (db: BenchDatabase) =>
  db.query<{ address: string; healthy: boolean; age: number }>(
    "SELECT address, healthy, round(extract(epoch FROM now()::timestamp - last_heartbeat)::numeric, 1)::float8 AS age FROM cluster_runners ORDER BY address"
  )

export const describeCounts = (counts: ReadonlyMap<string, number>) =>
  [...counts].sort(([a], [b]) => a.localeCompare(b)).map(([name, n]) => `${name} ${n}`).join(", ") || "none"
