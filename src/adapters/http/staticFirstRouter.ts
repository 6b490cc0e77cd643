import type { Result, Router } from "hono/router"
import { RegExpRouter } from "hono/router/reg-exp-router"

/** A path with no parameter (`:name`) and no wildcard (`*`): matched by its exact text. */
const isStatic = (path: string) => !path.includes(":") && !path.includes("*")

/**
 * Hono's RegExpRouter (one regular expression per method) for every route, with the paths that
 * have no parameter looked up first by their text.
 *
 * RegExpRouter refuses a static route beside a parameter of the same method at the same place,
 * which the interface has twice (`GET /devices/me` beside `GET /devices/{id}`,
 * `GET /organisations/users` beside `GET /organisations/{organisationUserId}`), and Hono's
 * default SmartRouter then falls back to the TrieRouter for every request (~2.5 KB more per
 * request; bench:rest `GET /devices/{id}` on Postgres 1.23× the req/s with this router, three
 * alternating pairs, bench/RESULTS.md). The TrieRouter also matched both routes of `/devices/me`,
 * and its last match, the parameter's, labelled the request in metrics and logs.
 *
 * Here each kind goes to a RegExpRouter of its own: static routes to one, parameter routes to the
 * other, and what has a wildcard (middleware: `*`, `/v1/*`) to both, in the order added, so either
 * router answers a request with its middleware first. A request whose method and path name a
 * static route is answered by the static router (a static route wins over a parameter that would
 * take the same text: `/devices/me` is not the device "me"), any other by the parameter router.
 */
export class StaticFirstRouter<T> implements Router<T> {
  readonly name = "StaticFirstRouter"
  readonly #statics = new RegExpRouter<T>()
  readonly #params = new RegExpRouter<T>()
  /** The methods of each static route's path (ALL included): looked up per request without making a key. */
  readonly #staticMethods = new Map<string, Set<string>>()

  add(method: string, path: string, handler: T): void {
    if (isStatic(path)) {
      const methods = this.#staticMethods.get(path) ?? new Set<string>()
      methods.add(method)
      this.#staticMethods.set(path, methods)
      this.#statics.add(method, path, handler)
      return
    }
    if (path.includes("*")) this.#statics.add(method, path, handler)
    this.#params.add(method, path, handler)
  }

  match(method: string, path: string): Result<T> {
    const methods = this.#staticMethods.get(path)
    return methods !== undefined && (methods.has(method) || methods.has("ALL"))
      ? this.#statics.match(method, path)
      : this.#params.match(method, path)
  }
}
