/**
 * A typed REST client for applications and devices. Web-standard `fetch` only, so it runs in
 * Node, Deno and browsers.
 *
 * ```ts
 * const voltaic = createRestClient({ baseUrl: "http://localhost:8080/v1", key: "a_sk_…" })
 * const space = await voltaic.spaces.create({ name: "Plant" })
 * const device = await voltaic.devices.create({ name: "Meter", space: { id: space.id } })
 * await voltaic.events.publish({ name: "temperature", data: 21.5, device: { id: device.id } })
 * ```
 */

export interface RestClientOptions {
  /** Ends with `/v1`. */
  readonly baseUrl: string
  /** Application key, device secret key or user token. */
  readonly key: string
  readonly fetch?: typeof fetch
}

/** A non-2xx answer, with the server's error code and the field it names. */
export class VoltaicError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string
  ) {
    super(message)
    this.name = "VoltaicError"
  }
}

export interface Ref {
  readonly id: string
}
export interface DeviceRef {
  readonly id?: string
  readonly customId?: string
}

export interface Space {
  id: string
  clientId: string | null
  name: string
  isPublic: boolean
  disabled: boolean
  avatar: { default?: string; url?: string; thumbnail?: string } | null
  owner: { organisation: { id: string; name: string } }
  timezone: string
  country: string | null
  createdAt: number
  updatedAt: number
}

export interface Device {
  id: string
  name: string
  customId: string | null
  isMain: boolean
  isActive: boolean
  serialNumber: string | null
  batchNumber: string | null
  space: Space | null
  product: { id: string; name: string } | null
  place: Ref | null
  gateway: Ref | null
  state: Record<string, unknown> | null
  meta: Record<string, unknown> | null
  lastSeenAt: number | null
  /** Live fields, from the process that owns the device. */
  live: { isOnline: boolean; state: "unknown" | "online" | "offline" | "unwatched"; lastSeenAt: number | null }
  createdAt: number
  updatedAt: number
}

export interface Event {
  id: string
  name: string
  data: unknown
  timestamp: number
  device: Ref
  /** Present when a file was attached; `events.file(id)` downloads it. */
  file?: { filename: string | null; contentType: string; size: number }
}

/** A file attached to an event: sent as the multipart `file` part, received from `events.file`. */
export interface EventFile {
  readonly bytes: Uint8Array
  readonly contentType: string
  readonly filename?: string | null
}

export interface Location {
  id: string
  latitude: string
  longitude: string
  altitude: string | null
  timestamp: number
  device: Ref
}

export interface Command {
  id: string
  name: string
  slug: string
  device: Ref
  createdAt: number
  updatedAt: number
}

export interface CommandRun {
  id: string
  running: true
  slug: string
  data: unknown
  device: Ref
  command: Ref
  timestamp: number
}

export interface ListOptions {
  readonly limit?: number
  readonly page?: number
  readonly sort?: "ASC" | "DESC"
  readonly order?: string
  readonly since?: number | string
  readonly until?: number | string
}

type Query = Record<string, string | number | undefined>

export const createRestClient = (options: RestClientOptions) => {
  const doFetch = options.fetch ?? fetch
  const base = options.baseUrl.replace(/\/+$/, "")

  /** Sends a JSON (or multipart) body; a non-2xx answer throws its `VoltaicError`. */
  const send = async (method: string, path: string, body?: unknown, query?: Query): Promise<Response> => {
    const url = new URL(base + path)
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v))
    const multipart = body instanceof FormData
    const res = await doFetch(url, {
      method,
      headers: {
        authorization: `Bearer ${options.key}`,
        // fetch sets the multipart content type with its boundary itself.
        ...(body === undefined || multipart ? {} : { "content-type": "application/json" })
      },
      body: body === undefined ? undefined : multipart ? body : JSON.stringify(body)
    })
    if (!res.ok) {
      const text = await res.text()
      let error: { code?: string; message?: string; field?: string } | undefined
      try {
        error = (JSON.parse(text) as { error?: typeof error }).error
      } catch {
        // not JSON (a proxy's page): the status line says what happened
      }
      throw new VoltaicError(res.status, error?.code ?? "unknown", error?.message ?? (res.statusText || text), error?.field)
    }
    return res
  }

  const request = async <T>(method: string, path: string, body?: unknown, query?: Query): Promise<T> => {
    const text = await (await send(method, path, body, query)).text()
    return (text === "" ? undefined : JSON.parse(text)) as T
  }

  /** An event with a file: multipart, `data` as JSON text (the server parses it back). */
  const eventForm = (body: { name: string; data?: unknown; timestamp?: number; device?: DeviceRef }, file: EventFile) => {
    const form = new FormData()
    form.set("name", body.name)
    if (body.data !== undefined) form.set("data", JSON.stringify(body.data))
    if (body.timestamp !== undefined) form.set("timestamp", String(body.timestamp))
    if (body.device?.id !== undefined) form.set("device.id", body.device.id)
    if (body.device?.customId !== undefined) form.set("device.customId", body.device.customId)
    form.set("file", new Blob([new Uint8Array(file.bytes)], { type: file.contentType }), file.filename ?? "file")
    return form
  }

  const list = (options: ListOptions | undefined, extra: Query = {}): Query => ({ ...options, ...extra })

  return {
    whoami: () => request<{ id: string; kind: string; organisation: { id: string; name: string } }>("GET", "/whoami"),
    spaces: {
      create: (body: { name: string; timezone?: string; country?: string }) => request<Space>("POST", "/spaces", body),
      get: (id: string) => request<Space>("GET", `/spaces/${encodeURIComponent(id)}`),
      list: (opts?: ListOptions) => request<{ spaces: Array<Space>; count: number }>("GET", "/spaces", undefined, list(opts))
    },
    devices: {
      create: (body: { name: string; space: Ref; customId?: string }) => request<Device & { secretKey: string }>("POST", "/devices", body),
      get: (id: string) => request<Device>("GET", `/devices/${encodeURIComponent(id)}`),
      me: () => request<Device>("GET", "/devices/me"),
      list: (opts?: ListOptions & { spaceId?: string }) =>
        request<Array<Device>>("GET", "/devices", undefined, list(opts, { "space.id": opts?.spaceId, spaceId: undefined })),
      rotateSecretKey: (id: string) => request<{ id: string; secretKey: string }>("POST", `/devices/${encodeURIComponent(id)}/secretKey`)
    },
    events: {
      /** With `file`, sent as multipart with the file attached (up to 10 MiB). */
      publish: (body: { name: string; data?: unknown; timestamp?: number; device?: DeviceRef }, file?: EventFile) =>
        request<Event>("POST", "/events", file === undefined ? body : eventForm(body, file)),
      get: (id: string) => request<Event>("GET", `/events/${encodeURIComponent(id)}`),
      /** The file attached to an event (404 when it has none). */
      file: async (id: string): Promise<EventFile> => {
        const res = await send("GET", `/events/${encodeURIComponent(id)}/file`)
        const disposition = /filename="([^"]*)"/.exec(res.headers.get("content-disposition") ?? "")
        return {
          bytes: new Uint8Array(await res.arrayBuffer()),
          contentType: res.headers.get("content-type") ?? "application/octet-stream",
          filename: disposition?.[1] ?? null
        }
      },
      list: (deviceId: string, opts?: ListOptions & { name?: string }) =>
        request<{ events: Array<Event>; count: number }>("GET", "/events", undefined, list(opts, { "device.id": deviceId }))
    },
    locations: {
      publish: (body: { latitude: number; longitude: number; altitude?: number; device?: DeviceRef }) =>
        request<Location>("POST", "/locations", body),
      get: (id: string) => request<Location>("GET", `/locations/${encodeURIComponent(id)}`),
      list: (deviceId: string, opts?: ListOptions) =>
        request<{ locations: Array<Location>; count: number }>("GET", "/locations", undefined, list(opts, { "device.id": deviceId }))
    },
    commands: {
      create: (body: { name: string; slug?: string; device: DeviceRef }) => request<Command>("POST", "/commands", body),
      get: (id: string) => request<Command>("GET", `/commands/${encodeURIComponent(id)}`),
      update: (id: string, body: { name?: string; slug?: string }) => request<Command>("PUT", `/commands/${encodeURIComponent(id)}`, body),
      delete: (id: string) => request<{ id: string; deleted: true }>("DELETE", `/commands/${encodeURIComponent(id)}`),
      run: (body: { slug: string; device: Ref; data?: unknown } | { id: string; data?: unknown }) =>
        request<CommandRun>("POST", "/commands/run", body),
      list: (deviceId: string, opts?: ListOptions) =>
        request<{ commands: Array<Command>; count: number }>("GET", "/commands", undefined, list(opts, { "device.id": deviceId }))
    }
  }
}

export type RestClient = ReturnType<typeof createRestClient>
