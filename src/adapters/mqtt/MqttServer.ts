import { Context, Effect, FiberSet, Layer, Result, type Scope } from "effect"
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer } from "node:http"
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from "node:net"
import type { Duplex } from "node:stream"
import { createWebSocketStream, WebSocketServer } from "ws"
import { AppConfig } from "../../config.ts"
import { type ListenFailed, listenFailure, type ListenOptions } from "../http/HttpListener.ts"
import { bindGated, failWithAll } from "../listening.ts"
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

/** The MQTT ports, bound at start before anything else; `open` hands them the broker. */
export interface MqttListenersService {
  readonly port: number
  readonly wsPort: number
  open(handle: MqttBroker["Service"]["handle"]): Effect.Effect<void, never, Scope.Scope>
}

/** Binds TCP (`MQTT_PORT`) and WebSocket (`MQTT_WS_PORT`), reporting a clash of either or both. */
export class MqttListeners extends Context.Service<MqttListeners, MqttListenersService>()("voltaic/adapters/mqtt/MqttListeners") {
  static readonly layer = Layer.effect(
    MqttListeners,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const run = yield* FiberSet.makeRuntime<never>()
      const logError = (what: string) => (error: Error) => {
        run(Effect.logError(`${what} failed: ${error.message}`))
      }

      const tcpConnections = new Set<Socket>()
      const tcp = bindGated<[Duplex, IncomingMessage?], void, ListenFailed, never>((handle) => {
        // No Nagle: a PUBACK or a delivery is a small write that must leave at once, not wait for
        // the ACK of the previous segment (bench:ingest latency, bench/RESULTS.md).
        const server = createNetServer({ noDelay: true }, (socket) => {
          track(tcpConnections, socket)
          void handle(socket)
        })
        return Effect.acquireRelease(
          listen(server, { port: config.mqttPort, host: config.host, setting: "MQTT_PORT" }, logError("mqtt listener")),
          () => close(server, tcpConnections)
        )
      })

      // Upgrades are handled here rather than by `ws` watching the server, so a listen failure
      // surfaces once, as `ListenFailed`.
      // A WebSocket message is read whole before MQTT sees it: bound it by the largest packet.
      const ws = bindGated<[Duplex, IncomingMessage?], void, ListenFailed, never>((handle) => {
        const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PACKET_BYTES + 8 })
        const wsConnections = new Set<Socket>()
        const server = createHttpServer((_request, response) => {
          response.writeHead(426, { upgrade: "websocket", "content-type": "text/plain" })
          response.end("MQTT over WebSocket: send an Upgrade request\n")
        })
        server.on("connection", (socket: Socket) => track(wsConnections, socket))
        server.on("upgrade", (request, socket, head) => {
          wss.handleUpgrade(request, socket, head, (websocket) => void handle(createWebSocketStream(websocket), request))
        })
        wss.on("error", logError("mqtt-ws server"))
        return Effect.acquireRelease(
          listen(server, { port: config.mqttWsPort, host: config.host, setting: "MQTT_WS_PORT" }, logError("mqtt-ws listener")),
          () =>
            Effect.andThen(
              Effect.sync(() => {
                for (const client of wss.clients) client.terminate()
                wss.close()
              }),
              close(server, wsConnections)
            )
        )
      })

      const bound = yield* Effect.all([tcp, ws], { mode: "result" })
      const [tcpBound, wsBound] = bound
      if (Result.isFailure(tcpBound) || Result.isFailure(wsBound)) return yield* failWithAll(bound)
      return MqttListeners.of({
        port: tcpBound.success.port,
        wsPort: wsBound.success.port,
        open: (handle) => Effect.andThen(tcpBound.success.open(handle), wsBound.success.open(handle))
      })
    })
  )
}

/** MQTT over TCP and over WebSocket, both served by `MqttBroker`, on the ports `MqttListeners` bound. */
export class MqttServer extends Context.Service<MqttServer, MqttServerService>()("voltaic/adapters/mqtt/MqttServer") {
  static readonly layer = Layer.effect(
    MqttServer,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const broker = yield* MqttBroker
      const listeners = yield* MqttListeners
      yield* listeners.open(broker.handle)
      yield* Effect.logInfo(`mqtt listening on ${config.host}:${listeners.port}`)
      yield* Effect.logInfo(`mqtt-ws listening on ${config.host}:${listeners.wsPort}`)
      return MqttServer.of({ port: listeners.port, wsPort: listeners.wsPort })
    })
  )
}

/**
 * MQTT over TCP and WebSocket with its broker; needs the core services (`Auth`, `Ingest`,
 * `Bus`, `Sql`) and `MqttListeners`, bound first (see `ListenersLive`).
 */
export const MqttLive = MqttServer.layer.pipe(Layer.provideMerge(MqttBroker.layer))
