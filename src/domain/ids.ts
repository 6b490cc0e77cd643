import { randomBytes } from "node:crypto"

/** Type prefixes of API-DECISIONS.md "Wire format". */
export type IdPrefix =
  | "org" | "usr" | "ou" | "tem" | "spc" | "dev" | "evt" | "loc" | "cmd"
  | "alt" | "rul" | "tpl" | "gtw" | "prd" | "plc" | "key" | "tok" | "mcl"

const CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"

const encodeTime = (ms: number): string => {
  let out = ""
  let rest = ms
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[rest % 32] + out
    rest = Math.floor(rest / 32)
  }
  return out
}

const encodeRandom = (bytes: Uint8Array, chars: number): string => {
  let out = ""
  for (let i = 0; i < chars; i++) out += CROCKFORD[bytes[i] & 31]
  return out
}

/**
 * `prefix_` + 10 characters of millisecond time + 16 random characters (80 bits),
 * so ids sort by creation time like ULIDs and never collide in practice.
 */
export const newId = (prefix: IdPrefix, now: number = Date.now()): string =>
  `${prefix}_${encodeTime(now)}${encodeRandom(randomBytes(16), 16)}`

export type SecretPrefix = "a_sk" | "d_sk" | "u_at" | "u_rt" | "m_cs" | "m_at"

/** A bearer secret: its prefix and 192 random bits in base64url. */
export const newSecret = (prefix: SecretPrefix): string => `${prefix}_${randomBytes(24).toString("base64url")}`

export const secretKind = (secret: string): SecretPrefix | undefined => {
  const kind = secret.slice(0, 4)
  return kind === "a_sk" || kind === "d_sk" || kind === "u_at" || kind === "u_rt" || kind === "m_cs" || kind === "m_at"
    ? kind
    : undefined
}
