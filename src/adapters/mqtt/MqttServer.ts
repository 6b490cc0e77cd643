import { Context, Effect, FiberSet, Layer } from "effect"
import { createServer as createHttpServer, type Server as HttpServer } from "node:http"
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from "node:net"
import { createWebSocketStream, WebSocketServer } from "ws"
import { AppConfig } from "../../config.ts"
import { type ListenFailed, listenFailure, type ListenOptions } from "../http/HttpListener.ts"
import { MAX_PACKET_BYTES } from "./guard.ts"
import { MqttBroker } from "./MqttBroker.ts"

/** The ports MQTT listens on, as bound (`MQTT_PORT=0` / `MQTT_WS_PORT=0` pick free ones). */
export interface MqttServerService {
  readonly port: number
  readonly wsPort: number
}

type Server = NetServer | HttpServer

/** Listens, failing with `ListenFailed` naming the setting; once listening, later errors are only logged. */
const listen = (server: Server, options: ListenOptions, onError: (error: Error) => void) =>
  Effect.callback<number, ListenFailed>((resume) => {
    const failed = (error: Error) => resume(Effect.fail(listenFailure(options, error)))
    server.once("error", failed)
    server.listen(options.port, options.host, () => {
      server.off("error", failed)
      server.on("error", onError)
      const address: AddressInfo | string | null = server.address()
      resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : options.port))
    })
  })

/** Stops accepting and ends every connection, including those that never sent CONNECT. */
const close = (server: Server, connections: Set<Socket>) =>
  Effect.callback<void>((resume) => {
    server.close(() => resume(Effect.void))
    for (const socket of connections) socket.destroy()
  })

const track = (connections: Set<Socket>, socket: Socket) => {
  connections.add(socket)
  socket.once("close", () => connections.delete(socket))
}

/** MQTT over TCP (`MQTT_PORT`) and over WebSocket (`MQTT_WS_PORT`), both served by `MqttBroker`. */
export class MqttServer extends Context.Service<MqttServer, MqttServerService>()("voltaic/adapters/mqtt/MqttServer") {
  static readonly layer = Layer.effect(
    MqttServer,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const broker = yield* MqttBroker
      const run = yield* FiberSet.makeRuntime<never>()
      const logError = (what: string) => (error: Error) => {
        run(Effect.logError(`${what} failed: ${error.message}`))
      }

      const tcpConnections = new Set<Socket>()
      // No Nagle: a PUBACK or a delivery is a small write that must leave at once, not wait for
      // the ACK of the previous segment (bench:ingest latency, bench/RESULTS.md).
      const tcp = createNetServer({ noDelay: true }, (socket) => {
        track(tcpConnections, socket)
        broker.handle(socket)
      })
      const port = yield* Effect.acquireRelease(
        listen(tcp, { port: config.mqttPort, host: config.host, setting: "MQTT_PORT" }, logError("mqtt listener")),
        () => close(tcp, tcpConnections)
      )
      yield* Effect.logInfo(`mqtt listening on ${config.host}:${port}`)

      // Upgrades are handled here rather than by `ws` watching the server, so a listen failure
      // surfaces once, as `ListenFailed`.
      // A WebSocket message is read whole before MQTT sees it: bound it by the largest packet.
      const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PACKET_BYTES + 8 })
      const wsConnections = new Set<Socket>()
      const ws = createHttpServer((_request, response) => {
        response.writeHead(426, { upgrade: "websocket", "content-type": "text/plain" })
        response.end("MQTT over WebSocket: send an Upgrade request\n")
      })
      ws.on("connection", (socket: Socket) => track(wsConnections, socket))
      ws.on("upgrade", (request, socket, head) => {
        wss.handleUpgrade(request, socket, head, (websocket) => broker.handle(createWebSocketStream(websocket), request))
      })
      wss.on("error", logError("mqtt-ws server"))
      const wsPort = yield* Effect.acquireRelease(
        listen(ws, { port: config.mqttWsPort, host: config.host, setting: "MQTT_WS_PORT" }, logError("mqtt-ws listener")),
        () =>
          Effect.andThen(
            Effect.sync(() => {
              for (const client of wss.clients) client.terminate()
              wss.close()
            }),
            close(ws, wsConnections)
          )
      )
      yield* Effect.logInfo(`mqtt-ws listening on ${config.host}:${wsPort}`)

      return MqttServer.of({ port, wsPort })
    })
  )
}

/**
 * MQTT over TCP and WebSocket with its broker; needs the core services (`Auth`, `Ingest`,
 * `Bus`, `Sql`): `Layer.mergeAll(HttpLive, MqttLive).pipe(Layer.provide(CoreLive))`.
 */
export const MqttLive = MqttServer.layer.pipe(Layer.provideMerge(MqttBroker.layer))
