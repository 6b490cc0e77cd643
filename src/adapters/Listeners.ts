import { type Config, Context, Effect, Layer, Result } from "effect"
import { CoapListener } from "./coap/CoapListener.ts"
import { AppConfig, portClashes } from "../config.ts"
import { ListenFailed, ListenersFailed } from "./http/HttpListener.ts"
import { HttpPort } from "./http/HttpServer.ts"
import { failWithAll } from "./listening.ts"
import { MqttListeners } from "./mqtt/MqttServer.ts"

/**
 * Every listener (HTTP, MQTT over TCP and WebSocket, CoAP), bound before anything else is
 * built: a port in use stops the start before the store is opened or the first organisation
 * is created (issue 15), with one message naming every clash. Each adapter opens its own.
 */
export const ListenersLive = Layer.effectContext(
  Effect.gen(function*() {
    // One port for two listeners: said as such, not as the second finding it in use.
    const clashes = portClashes(yield* AppConfig)
    if (clashes.length > 0) return yield* new ListenersFailed({ failures: clashes.map((clash) => new ListenFailed(clash)) })
    const bound = yield* Effect.all([Layer.build(HttpPort.layer), Layer.build(MqttListeners.layer), Layer.build(CoapListener.layer)], {
      mode: "result"
    })
    const [http, mqtt, coap] = bound
    if (Result.isSuccess(http) && Result.isSuccess(mqtt) && Result.isSuccess(coap)) {
      return Context.mergeAll(http.success, mqtt.success, coap.success)
    }
    return yield* failWithAll<Config.ConfigError | ListenFailed | ListenersFailed>(bound)
  })
)
