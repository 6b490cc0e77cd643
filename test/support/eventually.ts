/**
 * Polls `probe` every 20 ms until it answers a value (not undefined); fails after `ms`. Answers
 * the value and when it was seen. For effects that happen after the request that caused them
 * returned (an alert raised by a device's entity, a space counting it).
 */
export const eventually = async <A>(probe: () => Promise<A | undefined> | A | undefined, ms: number, what: string): Promise<{ value: A; at: number }> => {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await probe()
    if (value !== undefined) return { value, at: Date.now() }
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** Polls `check` until it holds; fails after `ms`. */
export const until = async (check: () => Promise<boolean> | boolean, ms: number, what: string): Promise<void> => {
  await eventually(async () => ((await check()) ? true : undefined), ms, what)
}
