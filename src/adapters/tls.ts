import { Effect, Option } from "effect"
import { createPrivateKey, X509Certificate } from "node:crypto"
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
      new ListenFailed({ setting, message: `${file} cannot be read (${reason(cause)})` })
  })

const reason = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

/**
 * What is wrong with a certificate and key as read, naming the setting at fault (the start and
 * `voltaic doctor` say the same); the parsed certificate when nothing is.
 */
export const tlsProblem = (
  certFile: string,
  certPem: string,
  keyFile: string,
  keyPem: string
): { readonly setting: string; readonly message: string } | X509Certificate => {
  let cert: X509Certificate
  try {
    cert = new X509Certificate(certPem)
  } catch (cause) {
    return { setting: "TLS_CERT_FILE", message: `${certFile} is not a PEM certificate (${reason(cause)})` }
  }
  let key: ReturnType<typeof createPrivateKey>
  try {
    key = createPrivateKey(keyPem)
  } catch (cause) {
    return { setting: "TLS_KEY_FILE", message: `${keyFile} is not an unencrypted PEM private key (${reason(cause)})` }
  }
  if (!cert.checkPrivateKey(key)) {
    return { setting: "TLS_KEY_FILE", message: `${keyFile} is not the key of the certificate in ${certFile}: give the key the certificate was made with` }
  }
  try {
    createSecureContext({ cert: certPem, key: keyPem })
  } catch (cause) {
    return { setting: "TLS_CERT_FILE", message: `${certFile} and ${keyFile} are refused by TLS (${reason(cause)})` }
  }
  return cert
}

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
  const problem = tlsProblem(certFile, cert, keyFile, key)
  return problem instanceof X509Certificate ? Option.some<TlsMaterial>({ cert, key }) : yield* new ListenFailed(problem)
})
