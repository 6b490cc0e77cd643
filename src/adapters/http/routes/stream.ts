import { z } from "@hono/zod-openapi"
import { Effect, Exit } from "effect"
import { Auth } from "../../../auth/Auth.ts"
import { Unavailable } from "../../../domain/errors.ts"
import { deliveryKind } from "../../../bus/topics.ts"
import type { LiveFeed } from "../liveFeed.ts"
import { type Api, credentialOf } from "../route.ts"

/** A comment line this often keeps proxies from closing an idle stream, and re-checks the credential. */
const HEARTBEAT_MS = 15_000

const encoder = new TextEncoder()

/**
 * Frames queued for a client that reads slower than its organisation's traffic comes: past
 * this, its stream ends with an `overflow` event (the console opens it again) instead of holding
 * the backlog in the server's memory.
 */
export const MAX_QUEUED_FRAMES = 10_000

/** One server-sent event; a payload spanning lines goes as several `data:` lines (joined back with \n). */
const frame = (kind: string, data: string) => encoder.encode(`event: ${kind}\ndata: ${data.split("\n").join("\ndata: ")}\n\n`)

/**
 * `GET /stream`: the organisation's live deliveries as server-sent events, from the same bus
 * that feeds MQTT subscribers, on the HTTP port (the console's live updates; no MQTT over
 * WebSocket port needed).
 */
export const streamRoutes = (api: Api, feed: LiveFeed | undefined): void => {
  api.route({
    method: "get",
    path: "/stream",
    tag: "Live",
    summary: "Live deliveries as server-sent events",
    description: "text/event-stream of what MQTT subscribers receive for the organisation's devices: events `event`, " +
      "`location`, `command` (a command run) and `alert` (an alert opened, repeated, acknowledged or resolved), each with " +
      "data `{\"topic\", \"deviceId\", \"resource\"}` where resource is the delivered JSON. device.id keeps one device's. " +
      "The stream ends when the credential stops working (checked every 15 s).",
    access: "read",
    query: z.object({ "device.id": z.string().min(1).max(200).optional() }),
    response: z.string().openapi({ description: "server-sent events: `event:` the kind, `data:` its JSON" }),
    responseType: "text/event-stream",
    handle: function*({ principal, query, c }) {
      if (feed === undefined) return yield* new Unavailable({ retryAfterSeconds: 60, message: "the live stream needs the bus, which this server runs without" })
      const context = yield* Effect.context<Auth>()
      const credential = credentialOf(c)
      const deviceId = query["device.id"]
      let stop = () => {}
      const body = new ReadableStream<Uint8Array>({
        start: (controller) => {
          const close = () => {
            stop()
            try {
              controller.close()
            } catch {
              // Already closed by the client going away.
            }
          }
          const unsubscribe = feed.subscribe((delivery) => {
            if (delivery.organisationId !== principal.organisationId) return
            if (deviceId !== undefined && delivery.deviceId !== deviceId) return
            const kind = deliveryKind(delivery.topic)
            if (kind === undefined) return
            if ((controller.desiredSize ?? 0) < -MAX_QUEUED_FRAMES) {
              controller.enqueue(frame("overflow", JSON.stringify({ message: "this stream fell too far behind; open it again" })))
              return close()
            }
            controller.enqueue(frame(kind, `{"topic":${JSON.stringify(delivery.topic)},"deviceId":${JSON.stringify(delivery.deviceId)},"resource":${delivery.payload}}`))
          })
          const heartbeat = setInterval(async () => {
            const exit = await Effect.runPromiseExitWith(context)(Auth.use((auth) => auth.authenticate(credential)))
            if (Exit.isFailure(exit)) {
              controller.enqueue(frame("expired", JSON.stringify({ message: "the credential is no longer valid; sign in again" })))
              return close()
            }
            controller.enqueue(encoder.encode(": heartbeat\n\n"))
          }, HEARTBEAT_MS)
          stop = () => {
            clearInterval(heartbeat)
            unsubscribe()
          }
          c.req.raw.signal.addEventListener("abort", close)
          // Sent at once so the client knows the stream is open before anything happens.
          controller.enqueue(frame("ready", JSON.stringify({ organisationId: principal.organisationId, deviceId: deviceId ?? null })))
        },
        cancel: () => stop()
      })
      return new Response(body, {
        status: 200,
        headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache, no-transform", "x-accel-buffering": "no" }
      })
    }
  })
}
