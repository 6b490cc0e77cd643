import { createHash, randomBytes, scrypt, timingSafeEqual } from "node:crypto"

/**
 * Bearer secrets carry 192 random bits, so a fast hash is enough to store them:
 * nobody can brute-force the pre-image. Passwords are low-entropy and use scrypt.
 */
export const hashSecret = (secret: string): string => createHash("sha256").update(secret).digest("base64url")

/** Constant-time string comparison (lengths are not secret). */
export const constantTimeEqual = (a: string, b: string): boolean => {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && timingSafeEqual(left, right)
}

/** scrypt parameters: N=2^15, r=8, p=1 (OWASP minimum for scrypt), 32 MiB of memory. */
const N = 32768
const R = 8
const P = 1
const KEY_LENGTH = 32
const MAX_MEMORY = 64 * 1024 * 1024

const derive = (password: string, salt: Buffer, n: number, r: number, p: number): Promise<Buffer> =>
  new Promise((resolve, reject) =>
    scrypt(password, salt, KEY_LENGTH, { N: n, r, p, maxmem: MAX_MEMORY }, (err, key) => (err ? reject(err) : resolve(key)))
  )

/** `scrypt$N$r$p$salt$hash` in base64url, so parameters can be raised later. */
export const hashPassword = async (password: string): Promise<string> => {
  const salt = randomBytes(16)
  const key = await derive(password, salt, N, R, P)
  return `scrypt$${N}$${R}$${P}$${salt.toString("base64url")}$${key.toString("base64url")}`
}

export const verifyPassword = async (password: string, stored: string): Promise<boolean> => {
  const [scheme, n, r, p, salt, hash] = stored.split("$")
  if (scheme !== "scrypt" || !salt || !hash) return false
  const expected = Buffer.from(hash, "base64url")
  const key = await derive(password, Buffer.from(salt, "base64url"), Number(n), Number(r), Number(p))
  return key.length === expected.length && timingSafeEqual(key, expected)
}

/** The first characters of a secret, safe to show in lists. */
export const secretHint = (secret: string): string => `${secret.slice(0, 9)}…`
