/** The step-time breakdown: stacked bars (lib/stepBreakdown.ts), seconds per step or each phase's share of it. */
import { useState } from "react";
import type { MetricStore } from "../../api/liveMetrics";
import type { ChartDef } from "../../lib/charts";
import { axisNumbers, fmtShare, fmtSI, maxAbs } from "../../lib/chartLayout";
import type { Series } from "../../lib/series";
import { concatRuns, stepBreakdown } from "../../lib/stepBreakdown";
import type { ChartOptions } from "../ChartControls";
import type { Trace } from "../Plot";
import { baseLayout, ChartCard, type Layout, type LegendItem, type RunRef, useHidden } from "./ChartCard";

export function BreakdownChart({ def, store, runs, options, dark, onPointClick }: {
  def: ChartDef; store: MetricStore; runs: RunRef[]; options: ChartOptions; dark: boolean;
  onPointClick?: (runId: number, step: number) => void;
}) {
  const [hidden, toggle] = useHidden();
  const [share, setShare] = useState(false);
  const perRun = runs.map((r) => store.byRun.get(r.id)).filter((m): m is Map<string, Series> => !!m);
  const bd = stepBreakdown(concatRuns(perRun));
  if (!bd) return null;
  const traces: Trace[] = bd.segments.map((seg) => {
    const name = seg.afterStep ? `${seg.phase} (after the step)` : seg.phase === "other" ? "other (rest of the step)" : seg.phase;
    return {
      name, type: "bar", x: bd.x, y: seg.seconds, customdata: bd.first, width: bd.width * 0.88,
      marker: { color: seg.color, line: { width: 0 } },
      text: seg.seconds.map((v, i) => `${name}: ${fmtSI(v)} s (${fmtShare(bd.total[i] > 0 ? v / bd.total[i] : 0)})`),
      hovertemplate: "%{text}<extra></extra>", textposition: "none",
      ...(hidden.has(name) ? { visible: "legendonly" } : {}),
    };
  });
  const legend: LegendItem[] = bd.segments.map((seg, i) => ({ name: traces[i].name, color: seg.color, dash: "solid", glyph: "bar",
    note: fmtShare(seg.share) }));
  const { layout: common, grid } = baseLayout(dark);
  const layout = {
    ...common,
    barmode: "stack", barnorm: share ? "percent" : "", bargap: 0,
    xaxis: { gridcolor: grid, zeroline: false, title: { text: "" }, hoverformat: "d" },
    yaxis: { gridcolor: grid, zeroline: false, ...axisNumbers(share ? 100 : maxAbs(bd.total)), automargin: true, ticksuffix: share ? "%" : " s", rangemode: "tozero",
      ...(share ? { range: [0, 100], autorange: false } : {}) },
  } as Layout;
  const stepsNote = bd.width > 1 ? ` · each bar the mean of ${bd.width} steps` : "";
  // each update redraws: the last bar's mean changes without the bar count growing
  const resetKey = [[...hidden].join("|"), share, store.version, store.epoch, dark, runs.map((r) => r.id).join(".")].join(";");
  return (
    <ChartCard def={def} traces={traces} layout={layout} resetKey={resetKey} legend={legend} hidden={hidden} toggle={toggle}
      titleExtra={<>
        <span className="muted small chart-subtitle">{options.xAxis === "time" ? "by step" : ""}{stepsNote}</span>
        <span className="segmented chart-toggle" role="group" aria-label="step time as">
          <button type="button" aria-pressed={!share} onClick={() => setShare(false)}>seconds</button>
          <button type="button" aria-pressed={share} onClick={() => setShare(true)}>share of step</button>
        </span>
      </>}
      onPointClick={onPointClick ? (p) => {
        const step = typeof p.customdata === "number" ? p.customdata : Number(p.x);
        if (!Number.isFinite(step)) return;
        // a resumed run's bars after its parent's: the step belongs to the last run that started at or before it
        const owner = [...runs].reverse().find((r) => (store.byRun.get(r.id)?.get("timing_s/step")?.steps[0] ?? Infinity) <= step) ?? runs[runs.length - 1];
        onPointClick(owner.id, step);
      } : undefined} />
  );
}
