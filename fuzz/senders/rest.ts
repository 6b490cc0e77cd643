import { Agent, request } from "node:http"
import type { RestInput } from "../generators/index.ts"
import type { Answer } from "./mqtt.ts"

export interface HttpAnswer {
  readonly status: number
  readonly body: string
}

/** Sends one request: over a socket (`httpTransport`) or to the Hono app in process (`app.request`). */
export type HttpTransport = (input: RestInput) => Promise<HttpAnswer>

/** An input the HTTP client itself refuses to send (an invalid header, say): not a server answer. */
export class NotSent extends Error {}

/** `{"error": {"code"}}` of an error body, or why there is none. */
const errorCode = (status: number, body: string): string => {
  if (status < 400) return ""
  try {
    const parsed: unknown = JSON.parse(body)
    const error = typeof parsed === "object" && parsed !== null && "error" in parsed ? parsed.error : undefined
    const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined
    // POST /oauth/token answers RFC 6749 §5.2 bodies: `{"error": "invalid_request", …}`.
    if (typeof error === "string") return ` ${error} (RFC 6749 §5.2)`
    return typeof code === "string" ? ` ${code}` : " (JSON without error.code)"
  } catch {
    return " (not JSON)"
  }
}

export const verdictOfStatus = (status: number): Answer["verdict"] =>
  status < 300 ? "acked" : status === 503 ? "busy" : status >= 500 ? "failed" : "refused"

/** One request's answer; after `timeoutMs` without one it counts as lost (the transport may not time out itself). */
export const sendRest = async (transport: HttpTransport, input: RestInput, timeoutMs: number): Promise<Answer> => {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error("timeout"), { code: "TIMEOUT" })), timeoutMs)
  })
  try {
    const { status, body } = await Promise.race([transport(input), timeout])
    // A HEAD answer has no body to hold the JSON error.
    return { outcome: `${status}${input.method === "HEAD" ? " (HEAD)" : errorCode(status, body)}`, verdict: verdictOfStatus(status) }
  } catch (error) {
    if (error instanceof NotSent) return { outcome: `not sent: ${error.message}`, verdict: "none" }
    const code = typeof error === "object" && error !== null && "code" in error && typeof error.code === "string" ? error.code : String(error)
    return { outcome: `no answer: ${code}`, verdict: "lost" }
  } finally {
    clearTimeout(timer)
  }
}

/** Requests over keep-alive connections to the server's HTTP port (read per request: it changes on a restart). */
export const httpTransport = (host: string, port: () => number, sockets: number, timeoutMs: number): HttpTransport => {
  const agent = new Agent({ keepAlive: true, maxSockets: sockets })
  return (input) =>
    new Promise((resolve, reject) => {
      let req: ReturnType<typeof request>
      try {
        // A declared length: Node sends a DELETE's or OPTIONS' body without one (nor chunked), and the
        // server then reads it as the next request.
        const headers = input.body === undefined ? input.headers : { ...input.headers, "content-length": String(Buffer.byteLength(input.body)) }
        req = request({ host, port: port(), method: input.method, path: input.path, headers, agent, timeout: timeoutMs }, (res) => {
          const chunks: Array<Buffer> = []
          res.on("data", (chunk: Buffer) => chunks.push(chunk))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }))
          res.on("error", reject)
        })
      } catch (error) {
        return reject(new NotSent(error instanceof Error ? error.message : String(error)))
      }
      req.on("error", reject)
      req.on("timeout", () => req.destroy(Object.assign(new Error("timeout"), { code: "TIMEOUT" })))
      req.end(input.body)
    })
}
