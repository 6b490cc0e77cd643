import { generate, parse } from "coap-packet"
import { describe, expect, it } from "vitest"
import { type Block, blockValue, makeTransfers, parseBlock } from "../../src/adapters/coap/blockwise.ts"
import { makeExchanges } from "../../src/adapters/coap/exchanges.ts"
import { screen, wellFormed } from "../../src/adapters/coap/screen.ts"

const request = (overrides: Parameters<typeof generate>[0] = {}) =>
  generate({
    messageId: 0x1234,
    token: Buffer.from("abcd", "hex"),
    confirmable: true,
    code: "POST",
    options: [{ name: "Uri-Path", value: Buffer.from("events") }],
    payload: Buffer.from("{}"),
    ...overrides
  })

const hex = (s: string) => Buffer.from(s.replace(/ /g, ""), "hex")

describe("screening datagrams (RFC 7252 §3, §4)", () => {
  it("passes requests and the empty ACK/RST that end a separate response's retransmission", () => {
    expect(screen(request())._tag).toBe("pass")
    expect(screen(request({ confirmable: false }))._tag).toBe("pass")
    expect(screen(hex("60 00 12 34"))._tag).toBe("pass")
    expect(screen(hex("70 00 12 34"))._tag).toBe("pass")
  })

  it("resets a CoAP ping and any Confirmable message it cannot process", () => {
    const resetOf = (datagram: Buffer) => {
      const verdict = screen(datagram)
      return verdict._tag === "answer" ? verdict.datagram.toString("hex") : verdict._tag
    }
    expect(resetOf(hex("40 00 12 34"))).toBe("70001234") // ping
    expect(resetOf(hex("49 02 12 34"))).toBe("70001234") // token length 9
    expect(resetOf(hex("41 02 12 34"))).toBe("70001234") // token longer than the datagram
    expect(resetOf(hex("40 02 12 34 f0"))).toBe("70001234") // reserved option nibble
    expect(resetOf(hex("40 02 12 34 b6 65 76"))).toBe("70001234") // option value past the end
    expect(resetOf(hex("40 02 12 34 ff"))).toBe("70001234") // payload marker, no payload
    expect(resetOf(hex("40 45 12 34"))).toBe("70001234") // a 2.05 response sent to a server
    expect(resetOf(hex("40 e0 12 34"))).toBe("70001234") // reserved class 7
    // Text whose first byte reads as a Confirmable CoAP 1 header is indistinguishable from a broken CON.
    expect(resetOf(Buffer.from("GET / HTTP/1.1\r\n\r\n"))).toBe("70005420")
  })

  it("silently drops what is not CoAP 1, too short, or not Confirmable", () => {
    for (const datagram of [Buffer.alloc(0), hex("40 02 12"), hex("80 02 12 34"), Buffer.from("hello, not CoAP"), hex("50 02 12 34 ff"), hex("50 00 12 34"), hex("50 45 12 34"), hex("60 45 12 34"), hex("60 02 12 34")]) {
      expect(screen(datagram)._tag, datagram.toString("hex")).toBe("drop")
    }
  })

  it("agrees with coap-packet on well-formed messages", () => {
    const samples = [
      request(),
      request({ token: Buffer.alloc(8, 1), options: [{ name: "Uri-Path", value: Buffer.from("a".repeat(300)) }, { name: "Content-Format", value: Buffer.of(50) }] }),
      request({ payload: Buffer.alloc(0) }),
      request({ options: [{ name: "Uri-Path", value: Buffer.from("events") }, { name: "Size1", value: Buffer.of(1, 0) }, { name: "292", value: Buffer.of(7) }] })
    ]
    for (const datagram of samples) {
      expect(wellFormed(datagram)).toBe(true)
      expect(() => parse(datagram)).not.toThrow()
    }
  })
})

describe("Block1 reassembly (RFC 7959)", () => {
  const size = 16
  const block = (num: number, more: boolean): Block => ({ num, more, szx: 0 })
  const bytes = (n: number, fill: number) => Buffer.alloc(n, fill)

  it("round-trips the option value", () => {
    for (const b of [block(0, true), block(1, false), { num: 300, more: true, szx: 6 }, { num: 0xfffff, more: false, szx: 2 }]) {
      expect(parseBlock(blockValue(b))).toEqual(b)
    }
    expect(parseBlock(Buffer.of(0x07))).toBeUndefined()
    expect(parseBlock(Buffer.of(1, 2, 3, 4))).toBeUndefined()
  })

  it("acknowledges blocks with 2.31 and hands over the whole payload after the last", () => {
    const transfers = makeTransfers(1000)
    expect(transfers.block("k", block(0, true), bytes(size, 1), undefined, 0)).toMatchObject({ _tag: "reply", reply: { code: "2.31" } })
    expect(transfers.block("k", block(1, true), bytes(size, 2), undefined, 0)).toMatchObject({ _tag: "reply", reply: { code: "2.31" } })
    // Block 1 again (its ACK was lost): replaced, not appended.
    transfers.block("k", block(1, true), bytes(size, 2), undefined, 0)
    const done = transfers.block("k", block(2, false), bytes(5, 3), undefined, 0)
    expect(done).toEqual({ _tag: "complete", payload: Buffer.concat([bytes(size, 1), bytes(size, 2), bytes(5, 3)]) })
    expect(transfers.size()).toBe(0)
  })

  it("answers 4.08 to blocks out of order or without their start, and 4.13 past the limit", () => {
    const transfers = makeTransfers(100)
    expect(transfers.block("k", block(1, true), bytes(size, 1), undefined, 0)).toMatchObject({ reply: { code: "4.08" } })
    transfers.block("k", block(0, true), bytes(size, 1), undefined, 0)
    expect(transfers.block("k", block(2, true), bytes(size, 1), undefined, 0)).toMatchObject({ reply: { code: "4.08" } })
    expect(transfers.block("k", block(0, true), bytes(size, 1), 101, 0)).toMatchObject({ reply: { code: "4.13", size1: 100 } })
    expect(transfers.block("k", block(6, true), bytes(size, 1), undefined, 0)).toMatchObject({ reply: { code: "4.13", size1: 100 } })
    expect(transfers.block("k", block(0, true), bytes(size - 1, 1), undefined, 0)).toMatchObject({ reply: { code: "4.00" } })
  })

  it("keeps uploads apart by key, forgets them after their lifetime and holds a bounded number", () => {
    const transfers = makeTransfers(1000, 1_000, 2)
    transfers.block("a", block(0, true), bytes(size, 1), undefined, 0)
    transfers.block("b", block(0, true), bytes(size, 2), undefined, 0)
    expect(transfers.block("a", block(1, false), bytes(1, 9), undefined, 10)).toMatchObject({ _tag: "complete", payload: Buffer.concat([bytes(size, 1), bytes(1, 9)]) })
    expect(transfers.block("b", block(1, false), bytes(1, 9), undefined, 5_000)).toMatchObject({ reply: { code: "4.08" } })
    transfers.block("c", block(0, true), bytes(size, 1), undefined, 0)
    transfers.block("d", block(0, true), bytes(size, 1), undefined, 0)
    transfers.block("e", block(0, true), bytes(size, 1), undefined, 0)
    expect(transfers.size()).toBe(2)
    expect(transfers.block("c", block(1, false), bytes(1, 9), undefined, 0)).toMatchObject({ reply: { code: "4.08" } })
  })
})

describe("message deduplication (RFC 7252 §4.5)", () => {
  it("gives every copy the first copy's reply, in flight or done, for the exchange lifetime", async () => {
    const exchanges = makeExchanges<string>(1_000, 10)
    let started = 0
    const start = (value: string) => () => {
      started += 1
      return Promise.resolve(value)
    }
    const first = exchanges.reply("peer|1", 0, start("a"))
    const copy = exchanges.reply("peer|1", 1, start("b"))
    expect(copy).toBe(first)
    expect(await copy).toBe("a")
    expect(exchanges.has("peer|1", 999)).toBe(true)
    expect(await exchanges.reply("peer|2", 2, start("c"))).toBe("c")
    expect(started).toBe(2)
    expect(exchanges.has("peer|1", 1_000)).toBe(false)
    expect(await exchanges.reply("peer|1", 1_000, start("d"))).toBe("d")
  })

  it("holds a bounded number of exchanges, forgetting the oldest", () => {
    const exchanges = makeExchanges<number>(1_000, 3)
    for (let i = 0; i < 5; i++) void exchanges.reply(`k${i}`, 0, () => Promise.resolve(i))
    expect(exchanges.size()).toBe(3)
    expect(exchanges.has("k0", 0)).toBe(false)
    expect(exchanges.has("k4", 0)).toBe(true)
  })
})
