/** The devices a run aims at, made through REST: over a socket (`npm run fuzz`) or `app.request` (the test). */

/** A REST call with the application key: the JSON object answered with 200, or a thrown error. */
export type Call = (method: string, path: string, body?: unknown) => Promise<Record<string, unknown>>

export interface Seeded {
  readonly devices: Record<"valid" | "invalid" | "odd" | "frozen", { readonly id: string; readonly key: string }>
  /** `updatedAt` of the frozen device, which only refused updates are sent to. */
  readonly frozenUpdatedAt: number
}

/** `fetch(url, init)` or Hono's `app.request(path, init)`, answering a `Response`. */
export type Fetch = (path: string, init: RequestInit) => Response | Promise<Response>

export const restCaller = (fetchFn: Fetch, key: string): Call => async (method, path, body) => {
  const res = await fetchFn(`/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  const json: unknown = await res.json()
  if (res.status !== 200 || typeof json !== "object" || json === null) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`)
  return Object.fromEntries(Object.entries(json))
}

/** A space, the four devices of the run with their keys, and a `reboot` command on each but the frozen one. */
export const seed = async (call: Call): Promise<Seeded> => {
  const space = await call("POST", "/spaces", { name: "Fuzz" })
  const made = new Map<string, { id: string; key: string }>()
  for (const role of ["valid", "invalid", "odd", "frozen"] as const) {
    const device = await call("POST", "/devices", { name: `fuzz ${role}`, space: { id: space.id } })
    made.set(role, { id: String(device.id), key: String(device.secretKey) })
    if (role !== "frozen") await call("POST", "/commands", { name: "reboot", device: { id: device.id } })
  }
  const device = (role: string) => made.get(role) ?? { id: "", key: "" }
  const frozen = await call("GET", `/devices/${device("frozen").id}`)
  return {
    devices: { valid: device("valid"), invalid: device("invalid"), odd: device("odd"), frozen: device("frozen") },
    frozenUpdatedAt: Number(frozen.updatedAt)
  }
}
