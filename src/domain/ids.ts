import { randomBytes, randomFillSync } from "node:crypto"

/** Type prefixes of API-DECISIONS.md "Wire format". */
export type IdPrefix =
  | "org" | "usr" | "ou" | "tem" | "spc" | "dev" | "evt" | "loc" | "cmd"
  | "alt" | "rul" | "tpl" | "gtw" | "prd" | "plc" | "key" | "tok" | "mcl"

const CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"

/** The last encoded millisecond: ids made in the same millisecond share it. */
let lastMs = -1
let lastTime = ""

const encodeTime = (ms: number): string => {
  if (ms === lastMs) return lastTime
  let out = ""
  let rest = ms
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[rest % 32] + out
    rest = Math.floor(rest / 32)
  }
  lastMs = ms
  lastTime = out
  return out
}

/**
 * Random bytes for ids, drawn from a pool refilled 4 KiB at a time: one `randomFillSync` per
 * 256 ids instead of a `randomBytes` call (and its buffer) per id, which cost ~3 µs each under
 * ingest load. The bytes come from the same CSPRNG; each is used once.
 */
const POOL_BYTES = 4096
const pool = new Uint8Array(POOL_BYTES)
let poolOffset = POOL_BYTES

/** CROCKFORD's character codes, indexed by a byte's low five bits. */
const CODES = Uint16Array.from(CROCKFORD, (c) => c.charCodeAt(0))

/**
 * 16 random characters as one string: `String.fromCharCode` makes it at once, where adding
 * them one by one made a string per character (~450 bytes per id, which every event and command
 * run paid; bench:ingest's heap sampling).
 */
const encodeRandom16 = (): string => {
  if (poolOffset + 16 > POOL_BYTES) {
    randomFillSync(pool)
    poolOffset = 0
  }
  const b = poolOffset
  poolOffset += 16
  return String.fromCharCode(
    CODES[pool[b] & 31], CODES[pool[b + 1] & 31], CODES[pool[b + 2] & 31], CODES[pool[b + 3] & 31],
    CODES[pool[b + 4] & 31], CODES[pool[b + 5] & 31], CODES[pool[b + 6] & 31], CODES[pool[b + 7] & 31],
    CODES[pool[b + 8] & 31], CODES[pool[b + 9] & 31], CODES[pool[b + 10] & 31], CODES[pool[b + 11] & 31],
    CODES[pool[b + 12] & 31], CODES[pool[b + 13] & 31], CODES[pool[b + 14] & 31], CODES[pool[b + 15] & 31]
  )
}

/**
 * `prefix_` + 10 characters of millisecond time + 16 random characters (80 bits),
 * so ids sort by creation time like ULIDs and never collide in practice.
 */
export const newId = (prefix: IdPrefix, now: number = Date.now()): string =>
  `${prefix}_${encodeTime(now)}${encodeRandom16()}`

export type SecretPrefix = "a_sk" | "d_sk" | "u_at" | "u_rt" | "m_cs" | "m_at"

/** A bearer secret: its prefix and 192 random bits in base64url. */
export const newSecret = (prefix: SecretPrefix): string => `${prefix}_${randomBytes(24).toString("base64url")}`

export const secretKind = (secret: string): SecretPrefix | undefined => {
  const kind = secret.slice(0, 4)
  return kind === "a_sk" || kind === "d_sk" || kind === "u_at" || kind === "u_rt" || kind === "m_cs" || kind === "m_at"
    ? kind
    : undefined
}
