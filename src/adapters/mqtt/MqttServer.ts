import { Context, Effect, FiberSet, Layer, Option, Result, type Scope } from "effect"
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from "node:net"
import type { Duplex } from "node:stream"
import { createServer as createTlsServer } from "node:tls"
import { createWebSocketStream, WebSocketServer } from "ws"
import { AppConfig } from "../../config.ts"
import { type ListenFailed, listenFailure, type ListenOptions } from "../http/HttpListener.ts"
import { bindGated, failWithAll } from "../listening.ts"
import { type TlsMaterial, tlsMaterial } from "../tls.ts"
import { MAX_PACKET_BYTES } from "./guard.ts"
import { MqttBroker } from "./MqttBroker.ts"

/** The ports MQTT listens on, as bound (`0` picks a free one); null where that listener is off. */
export interface MqttServerService {
  readonly port: number | null
  readonly wsPort: number | null
  readonly tlsPort: number | null
  readonly wssPort: number | null
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
export interface MqttListenersService extends MqttServerService {
  open(handle: MqttBroker["Service"]["handle"]): Effect.Effect<void, never, Scope.Scope>
}

type Handle = (stream: Duplex, request?: IncomingMessage) => void | Promise<void>

/**
 * Binds MQTT over TCP (`MQTT_PORT`) and WebSocket (`MQTT_WS_PORT`), and with a certificate
 * (`TLS_CERT_FILE`, `TLS_KEY_FILE`) over TLS (`MQTTS_PORT`) and secure WebSocket
 * (`MQTT_WSS_PORT`); a port set to `off` is not opened. Every clash is reported at once.
 */
export class MqttListeners extends Context.Service<MqttListeners, MqttListenersService>()("voltaic/adapters/mqtt/MqttListeners") {
  static readonly layer = Layer.effect(
    MqttListeners,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const tls = Option.getOrUndefined(yield* tlsMaterial)
      const run = yield* FiberSet.makeRuntime<never>()
      const logError = (what: string) => (error: Error) => {
        run(Effect.logError(`${what} failed: ${error.message}`))
      }

      /** MQTT over a byte stream: TCP, or TLS with `secure`. */
      const stream = (port: number | null, setting: string, secure: TlsMaterial | undefined) =>
        port === null ? Effect.succeed(undefined) : bindGated<[Duplex, IncomingMessage?], void, ListenFailed, never>((handle: Handle) => {
          const connections = new Set<Socket>()
          // No Nagle: a PUBACK or a delivery is a small write that must leave at once, not wait for
          // the ACK of the previous segment (bench:ingest latency, bench/RESULTS.md).
          const server = secure === undefined
            ? createNetServer({ noDelay: true }, (socket) => void handle(socket))
            : createTlsServer({ cert: secure.cert, key: secure.key, noDelay: true }, (socket) => void handle(socket))
          // Every connection, a TLS handshake not finished among them, is ended on close.
          server.on("connection", (socket: Socket) => track(connections, socket))
          if (secure !== undefined) server.on("tlsClientError", (error: Error) => run(Effect.logDebug(`${setting}: TLS handshake refused: ${error.message}`)))
          return Effect.acquireRelease(
            listen(server, { port, host: config.host, setting }, logError(`${setting} listener`)),
            () => close(server, connections)
          )
        })

      // Upgrades are handled here rather than by `ws` watching the server, so a listen failure
      // surfaces once, as `ListenFailed`.
      // A WebSocket message is read whole before MQTT sees it: bound it by the largest packet.
      const websocket = (port: number | null, setting: string, secure: TlsMaterial | undefined) =>
        port === null ? Effect.succeed(undefined) : bindGated<[Duplex, IncomingMessage?], void, ListenFailed, never>((handle: Handle) => {
          const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PACKET_BYTES + 8 })
          const connections = new Set<Socket>()
          const refuse = (_request: IncomingMessage, response: ServerResponse) => {
            response.writeHead(426, { upgrade: "websocket", "content-type": "text/plain" })
            response.end("MQTT over WebSocket: send an Upgrade request\n")
          }
          const server = secure === undefined ? createHttpServer(refuse) : createHttpsServer({ cert: secure.cert, key: secure.key }, refuse)
          server.on("connection", (socket: Socket) => track(connections, socket))
          server.on("upgrade", (request, socket, head) => {
            wss.handleUpgrade(request, socket, head, (ws) => void handle(createWebSocketStream(ws), request))
          })
          wss.on("error", logError(`${setting} server`))
          return Effect.acquireRelease(
            listen(server, { port, host: config.host, setting }, logError(`${setting} listener`)),
            () =>
              Effect.andThen(
                Effect.sync(() => {
                  for (const client of wss.clients) client.terminate()
                  wss.close()
                }),
                close(server, connections)
              )
          )
        })

      const bound = yield* Effect.all([
        stream(config.mqttPort, "MQTT_PORT", undefined),
        websocket(config.mqttWsPort, "MQTT_WS_PORT", undefined),
        tls === undefined ? Effect.succeed(undefined) : stream(config.mqttsPort, "MQTTS_PORT", tls),
        tls === undefined ? Effect.succeed(undefined) : websocket(config.mqttWssPort, "MQTT_WSS_PORT", tls)
      ], { mode: "result" })
      const [tcp, ws, mqtts, wss] = bound
      if (Result.isFailure(tcp) || Result.isFailure(ws) || Result.isFailure(mqtts) || Result.isFailure(wss)) return yield* failWithAll(bound)
      const all = [tcp.success, ws.success, mqtts.success, wss.success]
      return MqttListeners.of({
        port: tcp.success?.port ?? null,
        wsPort: ws.success?.port ?? null,
        tlsPort: mqtts.success?.port ?? null,
        wssPort: wss.success?.port ?? null,
        open: (handle) => Effect.forEach(all, (b) => (b === undefined ? Effect.void : b.open(handle)), { discard: true })
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
      const opened: ReadonlyArray<[string, number | null]> = [
        ["mqtt", listeners.port],
        ["mqtt-ws", listeners.wsPort],
        ["mqtts", listeners.tlsPort],
        ["mqtt-wss", listeners.wssPort]
      ]
      for (const [name, port] of opened) if (port !== null) yield* Effect.logInfo(`${name} listening on ${config.host}:${port}`)
      return MqttServer.of({ port: listeners.port, wsPort: listeners.wsPort, tlsPort: listeners.tlsPort, wssPort: listeners.wssPort })
    })
  )
}

/**
 * MQTT over TCP and WebSocket with its broker; needs the core services (`Auth`, `Ingest`,
 * `Bus`, `Sql`) and `MqttListeners`, bound first (see `ListenersLive`).
 */
export const MqttLive = MqttServer.layer.pipe(Layer.provideMerge(MqttBroker.layer))
