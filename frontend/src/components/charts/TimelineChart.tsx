import type { MetricStore } from "../../api/liveMetrics";
import type { ChartDef } from "../../lib/charts";
import { axisNumbers, fmtSI, maxAbs } from "../../lib/chartLayout";
import { timeline } from "../../lib/timeline";
import type { Trace } from "../Plot";
import { baseLayout, ChartCard, type Layout, type LegendItem, type RunRef, useHidden } from "./ChartCard";

const LANES = [{ name: "training", y: 0, color: "#e45756" }, { name: "rollout", y: 1, color: "#4c78a8" }];

/** The async modes' timeline: a bar per step on the rollout lane (its batch generated) and on the training lane
 *  (trained on), on the run's clock, so generation overlapping training — or the trainer waiting — is seen. */
export function TimelineChart({ def, store, runs, dark, onPointClick }: {
  def: ChartDef; store: MetricStore; runs: RunRef[]; dark: boolean; onPointClick?: (runId: number, step: number) => void;
}) {
  const [hidden, toggle] = useHidden();
  const run = runs[runs.length - 1];
  const tl = timeline(store.byRun.get(run.id));
  if (!tl) return null;
  const traces: Trace[] = LANES.map((lane) => {
    const spans = lane.name === "rollout" ? tl.rollout : tl.train;
    return {
      name: lane.name, type: "bar", orientation: "h", y: spans.map(() => lane.y), x: spans.map((x) => x.end - x.start),
      base: spans.map((x) => x.start), customdata: spans.map((x) => x.step), width: 0.6,
      marker: { color: lane.color, line: { width: 1, color: dark ? "#1f2933" : "#ffffff" } },
      text: spans.map((x) => `step ${x.step} ${lane.name}: ${fmtSI(x.start)}–${fmtSI(x.end)} s`),
      hovertemplate: "%{text}<extra></extra>", textposition: "none",
      ...(hidden.has(lane.name) ? { visible: "legendonly" } : {}),
    };
  });
  const legend: LegendItem[] = LANES.map((lane) => ({ name: lane.name, color: lane.color, dash: "solid", glyph: "bar" }));
  const { layout: common, grid } = baseLayout(dark);
  const layout = {
    ...common, barmode: "overlay",
    xaxis: { gridcolor: grid, zeroline: false, ...axisNumbers(maxAbs(tl.rollout.concat(tl.train).map((x) => x.end))), ticksuffix: " s", title: { text: "" } },
    yaxis: { gridcolor: grid, zeroline: false, tickvals: LANES.map((l) => l.y), ticktext: LANES.map((l) => l.name),
      range: [-0.6, 1.6], fixedrange: true, automargin: true },
  } as Layout;
  const resetKey = [[...hidden].join("|"), store.version, store.epoch, dark, run.id].join(";");
  return (
    <ChartCard def={def} traces={traces} layout={layout} resetKey={resetKey} legend={legend} hidden={hidden} toggle={toggle}
      titleExtra={<span className="muted small chart-subtitle" data-timeline-summary>
        steps {tl.steps[0]}–{tl.steps[1]}: generation overlapped training {fmtSI(tl.overlap)} s; the trainer waited {fmtSI(tl.idle)} s
      </span>}
      onPointClick={onPointClick ? (p) => {
        if (typeof p.customdata === "number") onPointClick(run.id, p.customdata);
      } : undefined} />
  );
}
