import { generate, parse } from "coap-packet"
import { describe, expect, it } from "vitest"
import { type Block, blockValue, makeTransfers, parseBlock } from "../../src/adapters/coap/blockwise.ts"
import { answeredMessageId, exchangeKey, makeExchanges } from "../../src/adapters/coap/exchanges.ts"
import { makeLogLimit, withHeld } from "../../src/adapters/coap/logLimit.ts"
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

  it("gives the reason for what it drops or resets, but not for a ping", () => {
    expect(screen(hex("80 02 12 34"))).toEqual({ _tag: "drop", reason: "malformed (RFC 7252 §3): CoAP version 2, not 1" })
    expect(screen(hex("50 00 12 34"))).toEqual({ _tag: "drop", reason: "an Empty Non-confirmable message (RFC 7252 §4.3)" })
    expect(screen(hex("49 02 12 34"))).toMatchObject({ _tag: "answer", reason: "malformed (RFC 7252 §3): token length 9, more than 8" })
    expect(screen(hex("40 45 12 34"))).toMatchObject({ _tag: "answer", reason: "code 2.05, not a request" })
    expect(screen(hex("40 00 12 34"))).toMatchObject({ _tag: "answer", reason: undefined })
  })

  it("refuses a Confirmable request with a critical option it does not understand, and ignores a Non-confirmable one", () => {
    const withOption = (name: string, confirmable = true) =>
      request({ confirmable, options: [{ name: "Uri-Path", value: Buffer.from("events") }, { name, value: Buffer.of(1) }] })
    for (const option of ["1", "5", "9", "19", "31", "2049", "65001"]) {
      expect(screen(withOption(option)), option).toMatchObject({ _tag: "refuse", reply: { code: "4.02" } })
      expect(screen(withOption(option, false)), option).toMatchObject({ _tag: "drop", reason: expect.stringContaining(`critical option ${option}`) })
    }
    expect(screen(withOption("35"))).toMatchObject({ _tag: "refuse", reply: { code: "5.05" } })
    // Understood critical options, and elective (even) ones understood or not, pass.
    for (const option of ["3", "7", "15", "17", "6", "60", "258", "292", "2048"]) expect(screen(withOption(option))._tag, option).toBe("pass")
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
  it("knows a copy by endpoint and message ID alone, and gives it what was sent for the first", () => {
    const exchanges = makeExchanges(1_000, 10)
    expect(exchangeKey("10.0.0.1", 5683, 7)).toBe(exchangeKey("10.0.0.1", 5683, 7))
    expect(exchangeKey("10.0.0.1", 5683, 7)).not.toBe(exchangeKey("10.0.0.1", 5684, 7))
    const key = exchangeKey("10.0.0.1", 5683, 7)
    expect(exchanges.find(key, 0)).toBeUndefined()
    exchanges.open(key, 0)
    // Being worked out: nothing to send yet.
    expect(exchanges.find(key, 1)).toEqual({ answer: undefined })
    exchanges.answered(key, Buffer.of(0x60, 0x00, 0x00, 0x07))
    expect(exchanges.find(key, 999)?.answer).toEqual(Buffer.of(0x60, 0x00, 0x00, 0x07))
    expect(exchanges.find(key, 1_000)).toBeUndefined()
    // Answers to messages never seen are not kept.
    exchanges.answered(exchangeKey("10.0.0.1", 5683, 8), Buffer.of(0x60, 0x00, 0x00, 0x08))
    expect(exchanges.size()).toBe(1)
  })

  it("takes the request's message ID from what answers it: ACK and NON, not CON or RST", () => {
    expect(answeredMessageId(hex("60 00 12 34"))).toBe(0x1234) // empty ACK
    expect(answeredMessageId(hex("61 41 12 34 ab"))).toBe(0x1234) // piggybacked 2.01
    expect(answeredMessageId(hex("51 41 12 34 ab"))).toBe(0x1234) // NON 2.01
    expect(answeredMessageId(hex("41 41 77 77 ab"))).toBeUndefined() // separate response
    expect(answeredMessageId(hex("70 00 12 34"))).toBeUndefined()
    expect(answeredMessageId(hex("60 00 12"))).toBeUndefined()
  })

  it("holds a bounded number of exchanges, forgetting the oldest", () => {
    const exchanges = makeExchanges(1_000, 3)
    for (let i = 0; i < 5; i++) exchanges.open(`k${i}`, 0)
    expect(exchanges.size()).toBe(3)
    expect(exchanges.find("k0", 0)).toBeUndefined()
    expect(exchanges.find("k4", 0)).toBeDefined()
  })
})

describe("rate-limited log lines (dropped datagrams)", () => {
  it("logs a peer's first line, counts the next ones in its window and reports them with its next line", () => {
    const limit = makeLogLimit(1_000, 10)
    expect(limit.admit("a:1", 0)).toEqual({ fromPeer: 0, fromOthers: 0 })
    expect(limit.admit("a:1", 10)).toBeUndefined()
    expect(limit.admit("a:1", 999)).toBeUndefined()
    expect(limit.admit("b:2", 20)).toEqual({ fromPeer: 0, fromOthers: 0 })
    expect(limit.admit("a:1", 1_000)).toEqual({ fromPeer: 2, fromOthers: 0 })
    expect(withHeld("coap datagram from a:1 dropped: x", { fromPeer: 2, fromOthers: 0 })).toBe("coap datagram from a:1 dropped: x (2 more from this peer not logged)")
    expect(withHeld("line", { fromPeer: 0, fromOthers: 0 })).toBe("line")
  })

  it("logs at most so many lines per window in all, reporting the rest with the next line", () => {
    const limit = makeLogLimit(1_000, 2)
    expect(limit.admit("a", 0)).toBeDefined()
    expect(limit.admit("b", 1)).toBeDefined()
    for (let i = 0; i < 50; i++) expect(limit.admit(`flood${i}`, 2)).toBeUndefined()
    expect(limit.admit("b", 3)).toBeUndefined()
    // The next window: b's held line is its own; the flood's are others'.
    expect(limit.admit("b", 1_001)).toEqual({ fromPeer: 1, fromOthers: 50 })
    expect(withHeld("line", { fromPeer: 1, fromOthers: 50 })).toBe("line (1 more from this peer, 50 from others not logged)")
    // A peer that went quiet: what it held back is reported with someone else's next line.
    const quiet = makeLogLimit(1_000, 10)
    quiet.admit("a", 0)
    quiet.admit("a", 5)
    expect(quiet.admit("c", 2_000)).toEqual({ fromPeer: 0, fromOthers: 1 })
  })
})
