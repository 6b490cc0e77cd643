import { Effect, Option } from "effect"
import { readFile } from "node:fs/promises"
import { createSecureContext } from "node:tls"
import { AppConfig } from "../config.ts"
import { ListenFailed } from "./http/HttpListener.ts"

/** A certificate (with its chain) and its private key, PEM, as the TLS listeners serve them. */
export interface TlsMaterial {
  readonly cert: string
  readonly key: string
}

const read = (setting: string, file: string) =>
  Effect.tryPromise({
    try: () => readFile(file, "utf8"),
    catch: (cause) =>
      new ListenFailed({ setting, message: `${file} cannot be read (${cause instanceof Error ? cause.message : String(cause)})` })
  })

/**
 * The certificate and key of `TLS_CERT_FILE` and `TLS_KEY_FILE`, read once at start; none when
 * neither is set. A file that cannot be read, or a key that is not the certificate's, stops the
 * start with the setting named, like a port in use.
 */
export const tlsMaterial = Effect.gen(function*() {
  const config = yield* AppConfig
  if (Option.isNone(config.tls)) return Option.none<TlsMaterial>()
  const { certFile, keyFile } = config.tls.value
  const [cert, key] = yield* Effect.all([read("TLS_CERT_FILE", certFile), read("TLS_KEY_FILE", keyFile)])
  return yield* Effect.try({
    try: () => {
      createSecureContext({ cert, key })
      return Option.some<TlsMaterial>({ cert, key })
    },
    catch: (cause) =>
      new ListenFailed({
        setting: "TLS_KEY_FILE",
        message: `${keyFile} is not a key for the certificate in ${certFile} (${cause instanceof Error ? cause.message : String(cause)})`
      })
  })
})
