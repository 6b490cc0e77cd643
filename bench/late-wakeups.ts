/**
 * Wakes every millisecond and calls `report` with each wake-up that came `reportMs` or more
 * late: the epoch ms when it was due and how late it was. What `bench/stall-probe.ts` (a
 * bystander process) and `bench/loop-probe.ts` (inside a broker) both time.
 */
export const onLateWakeups = (reportMs: number, report: (dueAt: number, lateMs: number) => void): NodeJS.Timeout => {
  let last = performance.now()
  return setInterval(() => {
    const now = performance.now()
    const late = now - last - 1
    if (late >= reportMs) report(performance.timeOrigin + last + 1, late)
    last = now
  }, 1)
}
