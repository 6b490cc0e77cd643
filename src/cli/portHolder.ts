import { readdir, readFile, readlink } from "node:fs/promises"
import { basename } from "node:path"

/** The process holding a port, as `voltaic doctor` names it. */
export interface PortHolder {
  readonly pid: number
  /** Its command line, shortened. */
  readonly command: string
}

/** TCP in LISTEN, per the kernel's `tcp_states` enumeration. */
const TCP_LISTEN = "0A"

/** Socket inodes bound to `port` in one of `/proc/net/{tcp,tcp6,udp,udp6}`. */
const socketInodes = async (table: string, port: number, listening: boolean): Promise<Array<string>> => {
  const text = await readFile(`/proc/net/${table}`, "utf8").catch(() => "")
  const inodes: Array<string> = []
  for (const line of text.split("\n").slice(1)) {
    // sl local_address rem_address st … uid timeout inode
    const fields = line.trim().split(/\s+/)
    if (fields.length < 10) continue
    const localPort = Number.parseInt(fields[1].split(":").at(-1) ?? "", 16)
    if (localPort === port && (!listening || fields[3] === TCP_LISTEN) && fields[9] !== "0") inodes.push(fields[9])
  }
  return inodes
}

const MAX_COMMAND = 80

/**
 * A command line as `doctor` prints it: the program by its file name (`node`, not the path
 * npm or nvm installed it under), and a line still too long cut in the middle. The end
 * stays: it is the script (`src/main.ts`, `dist/main.js`) that tells one Node process from another.
 */
export const shortCommand = (argv: ReadonlyArray<string>): string => {
  const parts = argv.filter((part) => part !== "")
  if (parts.length === 0) return ""
  const command = [basename(parts[0]), ...parts.slice(1)].join(" ")
  if (command.length <= MAX_COMMAND) return command
  const head = Math.floor((MAX_COMMAND - 1) / 3)
  return `${command.slice(0, head)}…${command.slice(command.length - (MAX_COMMAND - 1 - head))}`
}

/**
 * Which process holds a TCP (listening) or UDP port on this host, read from Linux's `/proc`:
 * the socket's inode in `/proc/net`, then the process with a descriptor on it. Undefined
 * where that cannot be seen (another OS, another user's process without root, a container
 * boundary): the caller still says that the port is in use.
 */
export const portHolder = async (port: number, protocol: "tcp" | "udp"): Promise<PortHolder | undefined> => {
  try {
    const tables = protocol === "tcp" ? ["tcp", "tcp6"] : ["udp", "udp6"]
    const inodes = new Set((await Promise.all(tables.map((t) => socketInodes(t, port, protocol === "tcp")))).flat())
    if (inodes.size === 0) return undefined
    const targets = new Set([...inodes].map((inode) => `socket:[${inode}]`))
    for (const entry of await readdir("/proc")) {
      if (!/^\d+$/.test(entry)) continue
      const fds = await readdir(`/proc/${entry}/fd`).catch(() => [])
      for (const fd of fds) {
        const target = await readlink(`/proc/${entry}/fd/${fd}`).catch(() => "")
        if (!targets.has(target)) continue
        const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "")
        return { pid: Number(entry), command: shortCommand(cmdline.split("\0")) }
      }
    }
    return undefined
  } catch {
    return undefined
  }
}
