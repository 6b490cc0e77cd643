import { PayloadTooLarge } from "../../domain/errors.ts"
import { coapError, type CoapReply, errorReply } from "./errors.ts"
import { EXCHANGE_LIFETIME_MS } from "./exchanges.ts"

/** A Block1/Block2 option value (RFC 7959 §2.2). */
export interface Block {
  readonly num: number
  readonly more: boolean
  /** SZX: the block size is 2^(szx + 4) bytes. */
  readonly szx: number
}

export const blockSize = (block: Block): number => 2 ** (block.szx + 4)

/** The option's unsigned integer value (RFC 7252 §3.2). */
export const readUint = (value: Uint8Array): number => value.reduce((n, byte) => n * 256 + byte, 0)

/** An unsigned integer in its shortest big-endian form (0 is empty). */
export const uint = (n: number): Buffer => {
  const bytes: Array<number> = []
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256)
  return Buffer.from(bytes)
}

/** undefined: malformed (longer than 3 bytes, or the reserved SZX 7). */
export const parseBlock = (value: Uint8Array): Block | undefined => {
  if (value.length > 3) return undefined
  const n = readUint(value)
  const szx = n & 0x7
  return szx === 7 ? undefined : { num: Math.floor(n / 16), more: (n & 0x8) !== 0, szx }
}

export const blockValue = (block: Block): Buffer => uint(block.num * 16 + (block.more ? 8 : 0) + block.szx)

/**
 * Block-wise uploads held at once. Each holds at most the payload limit, so this bounds
 * their memory (64 × 272 KiB ≈ 17 MiB); beyond it the oldest is dropped and its next block
 * answered 4.08.
 */
export const MAX_TRANSFERS = 64

export type Assembly =
  /** Answer this block (2.31 Continue, or a refusal ending the transfer). */
  | { readonly _tag: "reply"; readonly reply: CoapReply }
  /** The last block arrived: the whole payload, handled as one request. */
  | { readonly _tag: "complete"; readonly payload: Buffer }

export interface Transfers {
  /**
   * One Block1 block of the upload named by `key` (endpoint, path and Request-Tag). `total`
   * is the request's Size1, when it announces the size.
   */
  block(key: string, block: Block, payload: Buffer, total: number | undefined, now: number): Assembly
  readonly size: () => number
}

interface Transfer {
  parts: Array<Buffer>
  length: number
  until: number
}

const reply = (r: CoapReply): Assembly => ({ _tag: "reply", reply: r })

/**
 * Reassembles Block1 uploads (RFC 7959 §2.3, §2.5). The coap package keys blocks by token,
 * but a client may send each block with a new token (libcoap does): blocks are matched by
 * endpoint, path and Request-Tag (RFC 9175 §3) instead, must come in order (a repeat of a
 * block already held replaces it), and are refused with 4.13 and Size1 as soon as the upload
 * would pass `maxPayload`.
 */
export const makeTransfers = (maxPayload: number, lifetimeMs = EXCHANGE_LIFETIME_MS, max = MAX_TRANSFERS): Transfers => {
  const transfers = new Map<string, Transfer>()
  const tooLarge = () => reply(coapError(new PayloadTooLarge({ limit: maxPayload })))
  const incomplete = (message: string) => reply(errorReply("4.08", "request_entity_incomplete", message))
  const prune = (now: number) => {
    for (const [key, transfer] of transfers) {
      if (transfer.until > now && transfers.size < max) return
      transfers.delete(key)
    }
  }

  const block: Transfers["block"] = (key, block, payload, total, now) => {
    const size = blockSize(block)
    const offset = block.num * size
    if (offset + payload.length > maxPayload || (total !== undefined && total > maxPayload)) {
      transfers.delete(key)
      return tooLarge()
    }
    if (block.more && payload.length !== size) {
      transfers.delete(key)
      return reply(errorReply("4.00", "bad_request", `Block1: block ${block.num} carries ${payload.length} bytes, not ${size}`))
    }
    let transfer = transfers.get(key)
    if (block.num === 0) {
      // Block 0 (re)starts the upload.
      transfers.delete(key)
      prune(now)
      transfer = { parts: [], length: 0, until: now + lifetimeMs }
      transfers.set(key, transfer)
    }
    if (transfer === undefined || transfer.until <= now) {
      transfers.delete(key)
      return incomplete(`Block1: block ${block.num} without the blocks before it; start again from block 0`)
    }
    if (offset > transfer.length) {
      transfers.delete(key)
      return incomplete(`Block1: block ${block.num} after ${transfer.length} bytes; blocks must come in order`)
    }
    // A block sent again (its acknowledgement was lost) replaces what followed its offset.
    while (transfer.length > offset) {
      const last = transfer.parts.pop()
      if (last === undefined) break
      transfer.length -= last.length
      if (transfer.length < offset) {
        transfer.parts.push(last.subarray(0, offset - transfer.length))
        transfer.length = offset
      }
    }
    transfer.parts.push(payload)
    transfer.length += payload.length
    transfer.until = now + lifetimeMs
    if (!block.more) {
      transfers.delete(key)
      return { _tag: "complete", payload: Buffer.concat(transfer.parts, transfer.length) }
    }
    return reply({ code: "2.31", payload: "", block1: blockValue(block) })
  }

  return { block, size: () => transfers.size }
}
