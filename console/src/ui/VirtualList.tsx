import type { ComponentChildren } from "preact"
import { useEffect, useRef, useState } from "preact/hooks"

/**
 * Only the rows in view (plus a margin) are in the DOM; the scroll height is the full list's.
 * Rows are of one height. `onRange` says which rows are wanted, so pages can be fetched as they
 * come into view.
 */
export const VirtualList = ({
  count,
  rowHeight,
  height,
  row,
  onRange
}: {
  count: number
  rowHeight: number
  height: number
  row: (index: number) => ComponentChildren
  onRange?: (first: number, last: number) => void
}) => {
  const box = useRef<HTMLDivElement>(null)
  const [top, setTop] = useState(0)
  const overscan = 10
  const first = Math.max(0, Math.floor(top / rowHeight) - overscan)
  const last = Math.min(count, Math.ceil((top + height) / rowHeight) + overscan)
  useEffect(() => onRange?.(first, last), [first, last, onRange])
  const rows: Array<ComponentChildren> = []
  for (let i = first; i < last; i++) {
    rows.push(
      <div key={i} class="vrow" style={{ top: `${i * rowHeight}px`, height: `${rowHeight}px` }} data-index={i}>
        {row(i)}
      </div>
    )
  }
  return (
    <div ref={box} class="vlist" style={{ height: `${height}px` }} onScroll={(e) => setTop(e.currentTarget.scrollTop)} data-testid="device-scroller">
      <div style={{ height: `${count * rowHeight}px`, position: "relative" }}>{rows}</div>
    </div>
  )
}
