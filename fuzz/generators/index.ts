/**
 * The fuzzer's generators, shared by `npm run fuzz` (fuzz/run.ts, against a running server)
 * and the sample in `npm test` (test/fuzz/): fast-check arbitraries of MQTT, CoAP and REST
 * inputs, each marked valid by construction, known-invalid or odd (see `Marker`).
 */
export * from "./coap.ts"
export * from "./common.ts"
export * from "./mqtt.ts"
export * from "./payloads.ts"
export * from "./rest.ts"
