import { useEffect, useRef } from "preact/hooks"
import uPlot from "uplot"
import "uplot/dist/uPlot.min.css"

export interface Series {
  readonly label: string
  readonly values: ReadonlyArray<number | null>
}

const COLOURS = ["#2b6cb0", "#d97706", "#059669", "#b91c1c", "#7c3aed", "#0e7490", "#be185d", "#4d7c0f"]

/**
 * A uPlot chart of series over bucket starts (epoch ms). Once drawn, the container says how
 * many data points it drew (`data-points`), which the browser test reads.
 */
export const Chart = ({ timestamps, series, unit, timezone }: { timestamps: ReadonlyArray<number>; series: ReadonlyArray<Series>; unit: string; timezone: string }) => {
  const box = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const element = box.current
    if (element === null) return
    element.removeAttribute("data-points")
    const options: uPlot.Options = {
      width: Math.max(320, element.clientWidth),
      height: 320,
      tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), timezone),
      scales: { x: { time: true } },
      axes: [{}, { label: unit, size: 70 }],
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLOURS[i % COLOURS.length], width: 2, points: { show: timestamps.length <= 200 } }))],
      hooks: {
        draw: [
          (u) => {
            let points = 0
            for (let s = 1; s < u.data.length; s++) for (const v of u.data[s]) if (typeof v === "number" && Number.isFinite(v)) points++
            element.dataset.points = String(points)
          }
        ]
      }
    }
    const data: uPlot.AlignedData = [timestamps.map((t) => t / 1000), ...series.map((s) => [...s.values])]
    const plot = new uPlot(options, data, element)
    const resize = () => plot.setSize({ width: Math.max(320, element.clientWidth), height: 320 })
    addEventListener("resize", resize)
    return () => {
      removeEventListener("resize", resize)
      plot.destroy()
    }
  }, [timestamps, series, unit, timezone])
  return <div ref={box} class="chart" data-testid="energy-chart" />
}
