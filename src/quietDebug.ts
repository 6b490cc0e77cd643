import { createRequire } from "node:module"

/**
 * The npm package `debug` made free when it is off, for the packages that call it per packet:
 * mqtt-packet (aedes's parser and writer, some fifteen calls per MQTT packet) and coap. A call
 * of a disabled `debug` logger still gathers its arguments into an array and reads its
 * `enabled` getter: 3.3 % of the main thread's CPU and 7 % of the bytes it allocated under MQTT
 * QoS 0 on PGlite (bench:ingest, CPU and allocation profiles), and ~10 % of the server's CPU per
 * stored event when every logger was a no-op (39-40 against 43-49 µs, two alternated pairs).
 *
 * Imported first by the server's entries (before aedes and coap load), this puts a stand-in for
 * `require("debug")` into Node's module cache: a namespace that `DEBUG` enables gets `debug`'s
 * own logger, as before; any other gets a function that does nothing and carries the logger's
 * fields. `DEBUG` is read once, at start, as `debug` itself reads it; the one thing lost is
 * `debug.enable()` called later in the process waking loggers made before it (nothing here calls it).
 */

/** What the package exports: the logger factory, with its settings as fields. */
export interface CreateDebug {
  (namespace: string): unknown
  enabled(namespace: string): boolean
}

/** A disabled logger: callable, doing nothing, with the fields callers read. */
const quietLogger = (namespace: string, create: CreateDebug) =>
  Object.assign(() => {}, {
    namespace,
    enabled: false,
    useColors: false,
    diff: 0,
    extend: (sub: string, delimiter: string = ":") => create(`${namespace}${delimiter}${sub}`),
    destroy: () => false
  })

/** `createDebug` handing out loggers only for the namespaces it has enabled, and quiet ones for the rest. */
export const quietWhenOff = (createDebug: CreateDebug): CreateDebug => {
  const quiet: CreateDebug = new Proxy(createDebug, {
    apply: (target, thisArg, args: Array<unknown>) => {
      const namespace = String(args[0])
      return target.enabled(namespace) ? Reflect.apply(target, thisArg, args) : quietLogger(namespace, quiet)
    }
  })
  return quiet
}

/** `request` as the module at `from` (a file path or URL) resolves it; undefined when none is installed. */
const resolveFrom = (from: string | undefined, request: string): string | undefined => {
  if (from === undefined) return undefined
  try {
    return createRequire(from).resolve(request)
  } catch {
    return undefined
  }
}

const install = () => {
  const require = createRequire(import.meta.url)
  const users = [resolveFrom(resolveFrom(import.meta.url, "aedes"), "mqtt-packet"), resolveFrom(import.meta.url, "coap")]
  for (const path of new Set(users.map((user) => resolveFrom(user, "debug")))) {
    if (path === undefined) continue
    const createDebug = require(path) as CreateDebug
    const cached = require.cache[path]
    if (cached !== undefined) cached.exports = quietWhenOff(createDebug)
  }
}

install()
