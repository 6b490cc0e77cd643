export { createRestClient, type EventFile, type RestClient, type RestClientOptions, VoltaicError } from "./rest.ts"
export { connectStream, type StreamClient, type StreamNotification, type StreamOptions } from "./stream.ts"
