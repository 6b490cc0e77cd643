/**
 * The offline deadlines of a bucket's devices (`deviceHost.ts`), earliest first: a binary
 * min-heap of their machines' timers. A bucket hosts ~1,600 devices; finding the earliest
 * deadline and those due by looking at every one cost a pass over all of them on every step.
 *
 * Timers are never taken out when they stop counting (the machine cleared or replaced it, the
 * device left memory): the caller says which are still `current`, and the others are dropped as
 * they reach the top, or all at once when they outnumber the current ones.
 */
export interface Deadline {
  readonly deadline: number
}

export interface Deadlines<T extends Deadline> {
  /** A timer whose deadline was just set. */
  readonly add: (timer: T) => void
  /** The earliest current deadline; undefined: none. */
  readonly earliest: () => number | undefined
  /** The current timers due at `now`, in no particular order. */
  readonly due: (now: number) => Array<T>
  /** Timers kept, current or not. */
  readonly size: () => number
}

/** `current`: whether a timer still counts; `live`: how many do (bounds what is kept). */
export const makeDeadlines = <T extends Deadline>(current: (timer: T) => boolean, live: () => number): Deadlines<T> => {
  let heap: Array<T> = []

  const up = (i: number) => {
    const timer = heap[i]
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (heap[parent].deadline <= timer.deadline) break
      heap[i] = heap[parent]
      i = parent
    }
    heap[i] = timer
  }

  const down = (i: number) => {
    const timer = heap[i]
    const n = heap.length
    for (;;) {
      let child = 2 * i + 1
      if (child >= n) break
      if (child + 1 < n && heap[child + 1].deadline < heap[child].deadline) child++
      if (heap[child].deadline >= timer.deadline) break
      heap[i] = heap[child]
      i = child
    }
    heap[i] = timer
  }

  const pop = () => {
    const last = heap.pop()!
    if (heap.length > 0) {
      heap[0] = last
      down(0)
    }
  }

  /** Keeps the current timers only, as a heap again (Floyd's construction). */
  const compact = () => {
    heap = heap.filter(current)
    for (let i = (heap.length >> 1) - 1; i >= 0; i--) down(i)
  }

  return {
    add: (timer) => {
      if (heap.length >= 2 * live() + 64) compact()
      heap.push(timer)
      up(heap.length - 1)
    },
    earliest: () => {
      while (heap.length > 0 && !current(heap[0])) pop()
      return heap.length === 0 ? undefined : heap[0].deadline
    },
    due: (now) => {
      const out: Array<T> = []
      // Every entry at or before `now` lies in the subtree of entries at or before `now` below the root.
      const stack = heap.length > 0 ? [0] : []
      while (stack.length > 0) {
        const i = stack.pop()!
        const timer = heap[i]
        if (timer.deadline > now) continue
        if (current(timer)) out.push(timer)
        if (2 * i + 1 < heap.length) stack.push(2 * i + 1)
        if (2 * i + 2 < heap.length) stack.push(2 * i + 2)
      }
      return out
    },
    size: () => heap.length
  }
}
