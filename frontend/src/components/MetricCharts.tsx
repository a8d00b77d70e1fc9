/**
 * The chart grid of the Run and Compare pages: one Plot per chart definition, one trace per (run, key),
 * raw points faded under the EMA when smoothing is on. Clicking a point opens the samples of its step.
 * Titles and legends are HTML, not Plotly's: Plotly measures and lays out every legend entry and title
 * with SVG text, which was a third of the Compare page's drawing time (10 charts x 10 runs).
 */
import { useMemo, useState } from "react";
import type { MetricStore } from "../api/liveMetrics";
import { CHARTS, chartKeys, type ChartDef } from "../lib/charts";
import { plottable, type Series } from "../lib/series";
import { ema } from "../lib/smoothing";
import type { ChartOptions } from "./ChartControls";
import { Plot, type Trace } from "./Plot";
import { PALETTE, useDark } from "./useTheme";

export interface RunRef {
  id: number;
  name: string;
}

interface Props {
  store: MetricStore;
  runs: RunRef[];
  options: ChartOptions;
  onPointClick?: (runId: number, step: number) => void;
  charts?: ChartDef[];
}

/** Legend names without the common prefix, unless two keys of the chart would then look the same. */
function shortNames(keys: string[]): Map<string, string> {
  const strip = (k: string) => k.replace(/^(critic|actor|response_length|timing_s|perf)\//, "");
  const short = keys.map(strip);
  const unique = new Set(short).size === short.length;
  return new Map(keys.map((k, i) => [k, unique ? short[i] : k]));
}

/** Plotly pads a constant series to ±1, which flattens tiny values (a learning rate of 1e-6) onto 0. */
function constantRange(traces: Trace[], log: boolean): [number, number] | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const t of traces) {
    if (t.yaxis === "y2") continue;
    for (const v of t.y) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  }
  if (!Number.isFinite(lo) || lo !== hi || lo === 0) return null;
  const pad = Math.abs(lo) * 0.5;
  return log ? [Math.log10(lo) - 0.5, Math.log10(lo) + 0.5] : [lo - pad, lo + pad];
}

const DASHES: Record<string, string> = { dot: "2 3", dash: "6 3", dashdot: "6 3 2 3" };

export function MetricCharts({ store, runs, options, onPointClick, charts = CHARTS }: Props) {
  const dark = useDark();
  const available = useMemo(() => {
    const keys = new Set<string>();
    for (const run of store.byRun.values()) for (const k of run.keys()) keys.add(k);
    return keys;
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [store.version, store.epoch]);
  const visible = charts.map((def) => ({ def, keys: chartKeys(def, available) }))
    .filter((c) => c.keys.length > 0 || (c.def.absent && available.size > 0));
  if (!visible.length) return null;
  return (
    <div className="chart-grid">
      {visible.map(({ def, keys }) => keys.length === 0 ? (
        <section key={def.id} className="card chart-card chart-absent" data-chart={def.id} data-points={0}>
          <h3 className="chart-title">{def.title}</h3>
          <p className="notice small" role="note">{def.absent}</p>
        </section>
      ) : (
        <MetricChart key={def.id} def={def} keys={keys} store={store} runs={runs} options={options} dark={dark}
          onPointClick={onPointClick} />
      ))}
    </div>
  );
}

function MetricChart({ def, keys, store, runs, options, dark, onPointClick }: {
  def: ChartDef; keys: string[]; store: MetricStore; runs: RunRef[]; options: ChartOptions; dark: boolean;
  onPointClick?: (runId: number, step: number) => void;
}) {
  const multiRun = runs.length > 1;
  const [hidden, setHidden] = useState<ReadonlySet<string>>(new Set());
  const traces: Trace[] = [];
  const traceRun: number[] = [];
  const names = shortNames(keys);
  runs.forEach((run, r) => {
    keys.forEach((key, k) => {
      const s: Series | undefined = store.byRun.get(run.id)?.get(key);
      if (!s) return;
      const color = PALETTE[(multiRun ? r : k) % PALETTE.length];
      const dash = multiRun ? (["solid", "dot", "dash", "dashdot"] as const)[k % 4] : "solid";
      const x = options.xAxis === "time" ? s.walls.map((w) => new Date(w * 1000)) : s.steps;
      const y = plottable(s.values);
      const onY2 = def.y2?.includes(key);
      const name = multiRun ? `${run.name} · ${names.get(key)}` : names.get(key)!;
      const base = { x, customdata: s.steps, yaxis: onY2 ? "y2" : "y", type: "scatter" as const, mode: "lines" as const };
      if (def.stacked) {
        traces.push({ ...base, type: "scatter", name, y, stackgroup: `run${run.id}`, line: { width: 0.5, color }, hovertemplate: `${name}: %{y:.3g}s<extra>step %{customdata}</extra>` });
        traceRun.push(run.id);
        return;
      }
      if (options.smoothing > 0) {
        traces.push({ ...base, name: `${name} (raw)`, y, showlegend: false, opacity: 0.25, line: { color, width: 1, dash }, hoverinfo: "skip" });
        traceRun.push(run.id);
        traces.push({ ...base, name, y: plottable(ema(s.values, options.smoothing)), line: { color, width: 2, dash }, hovertemplate: `${name}: %{y:.4g}<extra>step %{customdata}</extra>` });
      } else {
        traces.push({ ...base, name, y, line: { color, width: 1.6, dash }, hovertemplate: `${name}: %{y:.4g}<extra>step %{customdata}</extra>` });
      }
      traceRun.push(run.id);
    });
  });
  for (const t of traces) {
    const legendName = t.showlegend === false ? t.name.replace(/ \(raw\)$/, "") : t.name;
    if (hidden.has(legendName)) t.visible = "legendonly";
  }
  const legend = traces.filter((t) => t.showlegend !== false).map((t) => {
    const line = (t.line ?? {}) as { color?: string; dash?: string };
    return { name: t.name, color: line.color ?? (t.fillcolor as string | undefined) ?? "#888", dash: line.dash ?? "solid" };
  });
  const toggle = (name: string) => setHidden((prev) => {
    const next = new Set(prev);
    if (next.has(name)) next.delete(name);
    else next.add(name);
    return next;
  });
  const fixedRange = def.stacked ? null : constantRange(traces, options.logY);
  const fg = dark ? "#d7dce2" : "#1f2933";
  const grid = dark ? "#2e3640" : "#e6e9ee";
  const shapes: Record<string, unknown>[] = def.band ? [{
    type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: def.band[0], y1: def.band[1],
    fillcolor: "rgba(84,162,75,0.14)", line: { width: 0 }, layer: "below",
  }] : [];
  const layout = {
    margin: { l: 48, r: def.y2 ? 44 : 12, t: 8, b: 28 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { color: fg, size: 11 },
    xaxis: { gridcolor: grid, zeroline: false, type: options.xAxis === "time" ? "date" : "linear", title: { text: "" } },
    yaxis: { gridcolor: grid, zeroline: false, type: options.logY ? "log" : "linear", exponentformat: "e",
      ...(fixedRange ? { range: fixedRange, autorange: false } : {}) },
    ...(def.y2 ? { yaxis2: { overlaying: "y", side: "right", showgrid: false, title: { text: def.y2title ?? "" }, rangemode: "tozero" } } : {}),
    showlegend: false,
    hovermode: "x unified",
    shapes,
  } as Partial<import("plotly.js-basic-dist-min").Layout>;
  const resetKey = [[...hidden].join("|"), store.epoch, fixedRange?.join(","), options.smoothing, options.xAxis, options.logY, dark, runs.map((r) => r.id).join("."), keys.join("|")].join(";");
  return (
    <section className="card chart-card" data-chart={def.id} data-points={traces.reduce((n, t) => n + t.x.length, 0)}>
      <h3 className="chart-title">{def.title}</h3>
      <Plot traces={traces} layout={layout} resetKey={resetKey} ariaLabel={def.title} height={230}
        onPointClick={onPointClick ? (p) => {
          const idx = traces.findIndex((t) => t.name === p.traceName);
          const step = typeof p.customdata === "number" ? p.customdata : Number(p.x);
          if (idx !== -1 && Number.isFinite(step)) onPointClick(traceRun[idx], step);
        } : undefined} />
      <ul className="chart-legend" aria-label={`${def.title} legend`}>
        {legend.map((l) => (
          <li key={l.name}>
            <button type="button" className="link-like" aria-pressed={!hidden.has(l.name)} title="show / hide"
              onClick={() => toggle(l.name)}>
              <svg width="22" height="8" aria-hidden><line x1="1" y1="4" x2="21" y2="4" stroke={l.color} strokeWidth="2.2"
                strokeDasharray={DASHES[l.dash] ?? undefined} /></svg>
              {l.name}
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}
