/** A bounded queue between the generator and a protocol's senders: `put` waits while it is full. */
export class Queue<A> {
  private readonly items: Array<A> = []
  private readonly takers: Array<(item: A | undefined) => void> = []
  private readonly putters: Array<() => void> = []
  private closed = false

  constructor(private readonly capacity: number) {}

  async put(item: A): Promise<void> {
    while (this.items.length >= this.capacity) await new Promise<void>((resolve) => this.putters.push(resolve))
    const taker = this.takers.shift()
    if (taker !== undefined) taker(item)
    else this.items.push(item)
  }

  /** The next item; undefined once closed and empty. */
  take(): Promise<A | undefined> {
    if (this.items.length > 0) {
      const item = this.items.shift()
      this.putters.shift()?.()
      return Promise.resolve(item)
    }
    if (this.closed) return Promise.resolve(undefined)
    return new Promise((resolve) => this.takers.push(resolve))
  }

  close(): void {
    this.closed = true
    for (const taker of this.takers.splice(0)) taker(undefined)
  }
}

/** Runs `width` workers, each taking items from `queue` until it is closed and empty. */
export const drain = <A>(queue: Queue<A>, width: number, work: (item: A) => Promise<void>): Promise<void> =>
  Promise.all(Array.from({ length: width }, async () => {
    for (let item = await queue.take(); item !== undefined; item = await queue.take()) await work(item)
  })).then(() => undefined)

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
