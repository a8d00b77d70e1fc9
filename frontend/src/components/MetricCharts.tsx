/**
 * The chart grid of the Run and Compare pages: one Plot per chart definition, one trace per (run, key),
 * raw points faded under the EMA when smoothing is on. Clicking a point opens the samples of its step.
 * Titles and legends are HTML, not Plotly's: Plotly measures and lays out every legend entry and title
 * with SVG text, which was a third of the Compare page's drawing time (10 charts x 10 runs).
 *
 * Readability rules (lib/chartLayout.ts): no secondary y axis; a series on a very different scale gets a
 * panel of its own under the main one, on the same step axis, titled in the gap above it; 0/1 flags are
 * markers on the step axis with a dotted line through the panels; a line identical to an earlier one is drawn
 * dashed over a wider one and its legend says "= the other"; a sparse series gets markers; tick labels
 * share one SI prefix per axis. The step-time chart is stacked bars (lib/stepBreakdown.ts); the async timeline
 * horizontal bars on the run's clock (lib/timeline.ts).
 */
import { useMemo } from "react";
import type { MetricStore } from "../api/liveMetrics";
import { CHARTS, chartKeys, type ChartDef } from "../lib/charts";
import { axisNumbers, constantRange, duplicateOf, flaggedSteps, groupIntoPanels, maxAbs, panelDomains, PERCENT_AXIS, PERCENT_FORMAT,
  valueFormat, wantsMarkers } from "../lib/chartLayout";
import { plottable, type Series } from "../lib/series";
import { ema } from "../lib/smoothing";
import type { ChartOptions } from "./ChartControls";
import type { Trace } from "./Plot";
import { PALETTE, useDark } from "./useTheme";
import { BreakdownChart } from "./charts/BreakdownChart";
import { baseLayout, ChartCard, type Layout, type LegendItem, MARGIN, PLOT_HEIGHT, type RunRef, styleKey, useHidden } from "./charts/ChartCard";
import { TimelineChart } from "./charts/TimelineChart";

export type { RunRef };

interface Props {
  store: MetricStore;
  runs: RunRef[];
  options: ChartOptions;
  onPointClick?: (runId: number, step: number) => void;
  charts?: ChartDef[];
}

const FLAG_COLOR = "#d62728";
/** more dotted lines than this would hatch the chart: past it, only the markers on the step axis */
const MAX_FLAG_LINES = 60;

/** Legend names without the common prefix, unless two keys of the chart would then look the same. */
function shortNames(keys: string[]): Map<string, string> {
  const strip = (k: string) => k.replace(/^(critic|actor|response_length|timing_s|perf)\//, "");
  const short = keys.map(strip);
  const unique = new Set(short).size === short.length;
  return new Map(keys.map((k, i) => [k, unique ? short[i] : k]));
}

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
      ) : def.breakdown ? (
        <BreakdownChart key={def.id} def={def} store={store} runs={runs} options={options} dark={dark} onPointClick={onPointClick} />
      ) : def.timeline ? (
        <TimelineChart key={def.id} def={def} store={store} runs={runs} dark={dark} onPointClick={onPointClick} />
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
  const [hidden, toggle] = useHidden();
  const names = def.names ? def.names(keys) : shortNames(keys);
  const flagKeys = def.flags?.keys.filter((k) => keys.includes(k)) ?? [];
  const declared = (def.panels ?? []).map((p) => ({ ...p, keys: p.keys.filter((k) => keys.includes(k)) }));
  const mainKeys = keys.filter((k) => !flagKeys.includes(k) && !declared.some((p) => p.keys.includes(k)));
  const seriesOf = (runId: number, key: string): Series | undefined => store.byRun.get(runId)?.get(key);
  const magnitudes = new Map(mainKeys.map((key) => [key, Math.max(0, ...runs.map((r) => maxAbs(seriesOf(r.id, key)?.values ?? [])))]));
  const panels = groupIntoPanels(mainKeys, declared, (key) => magnitudes.get(key) ?? 0);
  const axisId = (i: number) => (i === 0 ? "y" : `y${i + 1}`);
  const flagAxis = axisId(panels.length);
  // a copy of the steps, never the store's array: it grows in place as points stream in, after this render
  const xOf = (s: Series, steps?: number[]) => options.xAxis === "time"
    ? (steps ? steps.map((st) => new Date(s.walls[s.steps.indexOf(st)] * 1000)) : s.walls.map((w) => new Date(w * 1000)))
    : (steps ?? s.steps.slice());

  const traces: Trace[] = [];
  const traceRun: number[] = [];
  const traceKey: string[] = [];
  const legend: LegendItem[] = [];
  // several runs and several lines each: a legend entry per run (its colour) and per key (its dash), not one per
  // pair (2 runs x 4 keys read as 8 entries); each toggles all of its lines
  const lineKeys = keys.filter((k) => !flagKeys.includes(k) && runs.some((r) => seriesOf(r.id, k)));
  const factored = multiRun && lineKeys.length > 1;
  let longest = 0;
  for (const run of runs) for (const key of keys) longest = Math.max(longest, seriesOf(run.id, key)?.steps.length ?? 0);

  const panelValues: (number | null)[][][] = panels.map(() => []);
  panels.forEach((panel, p) => {
    const items: { run: RunRef; r: number; key: string; s: Series; name: string }[] = [];
    runs.forEach((run, r) => panel.keys.forEach((key) => {
      const s = seriesOf(run.id, key);
      if (s) items.push({ run, r, key, s, name: multiRun ? `${run.name} · ${names.get(key)}` : names.get(key)! });
    }));
    const dup = duplicateOf(items.map((it) => it.s));
    const hasCopies = new Set(dup.filter((d) => d !== -1));
    const fmt = panel.percent ? PERCENT_FORMAT : valueFormat(Math.max(0, ...items.map((it) => maxAbs(it.s.values))));
    items.forEach((it, i) => {
      const k = keys.indexOf(it.key);
      const color = PALETTE[(multiRun ? it.r : k) % PALETTE.length];
      let dash: string = multiRun ? (["solid", "dot", "dash", "dashdot"] as const)[k % 4] : "solid";
      if (dup[i] !== -1 && dash === "solid") dash = "dash";
      const width = hasCopies.has(i) ? 3.4 : dup[i] !== -1 ? 1.8 : 1.6; // the copy, dashed, over a wider original
      const markers = wantsMarkers(it.s.steps.length, longest);
      const base = { x: xOf(it.s), customdata: it.s.steps.slice(), meta: `${it.run.id}|${it.key}` /* what it draws: tests read it */, yaxis: axisId(p), type: "scatter" as const,
        mode: markers ? "lines+markers" as const : "lines" as const, ...(markers ? { marker: { size: 5, color } } : {}) };
      const y = plottable(it.s.values);
      const hovertemplate = `${it.name}: %{y:${fmt}}<extra>step %{customdata}</extra>`;
      if (options.smoothing > 0) {
        traces.push({ ...base, name: `${it.name} (raw)`, y, showlegend: false, opacity: 0.25, line: { color, width: 1, dash }, hoverinfo: "skip" });
        traceRun.push(it.run.id);
        traceKey.push(it.key);
        const smooth = plottable(ema(it.s.values, options.smoothing));
        traces.push({ ...base, name: it.name, y: smooth, line: { color, width: Math.max(2, width), dash }, hovertemplate });
        panelValues[p].push(smooth);
      } else {
        traces.push({ ...base, name: it.name, y, line: { color, width, dash }, hovertemplate });
        panelValues[p].push(y);
      }
      traceRun.push(it.run.id);
      traceKey.push(it.key);
      if (!factored) legend.push({ name: it.name, color, dash, glyph: "line", ...(dup[i] !== -1 ? { note: `= ${items[dup[i]].name}` } : {}) });
    });
  });
  if (factored) {
    runs.forEach((run, r) => {
      if (lineKeys.some((k) => seriesOf(run.id, k))) legend.push({ name: `run:${run.id}`, label: run.name, color: PALETTE[r % PALETTE.length], dash: "solid", glyph: "line" });
    });
    for (const key of lineKeys) {
      legend.push({ name: `key:${key}`, label: names.get(key), color: dark ? "#9aa5b1" : "#52606d", glyph: "line",
        dash: (["solid", "dot", "dash", "dashdot"] as const)[keys.indexOf(key) % 4] });
    }
  }

  // flags: a marker on the step axis (the bottom of the lowest panel) at every step where the flag is 1
  const flagged: { x: unknown; color: string }[] = [];
  runs.forEach((run, r) => flagKeys.forEach((key) => {
    const s = seriesOf(run.id, key);
    if (!s) return;
    const steps = flaggedSteps(s.steps, s.values);
    if (multiRun && !steps.length) return; // one "none" per run and flag would crowd the legend
    const role = key.split("/")[0];
    const name = `${multiRun ? `${run.name} · ` : ""}${role} ${def.flags!.label}`;
    const color = multiRun ? PALETTE[r % PALETTE.length] : (role === "critic" ? "#9467bd" : FLAG_COLOR);
    const x = xOf(s, steps);
    traces.push({ name, x, y: steps.map(() => 0), customdata: steps, yaxis: flagAxis, type: "scatter", mode: "markers",
      cliponaxis: false, marker: { symbol: "triangle-up", size: 11, color, line: { width: 1, color: dark ? "#111" : "#fff" } },
      hovertemplate: `${name}<extra>step %{customdata}</extra>` });
    traceRun.push(run.id);
    traceKey.push(key);
    legend.push({ name, color, dash: "solid", glyph: "marker", note: steps.length ? `${steps.length} step${steps.length === 1 ? "" : "s"}` : "none" });
    for (const v of x) flagged.push({ x: v, color });
  }));

  traces.forEach((t, i) => {
    const legendName = t.showlegend === false ? t.name.replace(/ \(raw\)$/, "") : t.name;
    if (hidden.has(legendName) || hidden.has(`run:${traceRun[i]}`) || hidden.has(`key:${traceKey[i]}`)) t.visible = "legendonly";
  });
  const { layout: common, grid, muted } = baseLayout(dark);
  const domains = panelDomains(panels.length, PLOT_HEIGHT - MARGIN.t - MARGIN.b);
  const layout: Record<string, unknown> = {
    ...common,
    xaxis: { gridcolor: grid, zeroline: false, type: options.xAxis === "time" ? "date" : "linear", title: { text: "" },
      anchor: axisId(panels.length - 1) },
    shapes: [
      ...(def.band ? [{ type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: def.band[0], y1: def.band[1],
        fillcolor: "rgba(84,162,75,0.14)", line: { width: 0 }, layer: "below" }] : []),
      ...(flagged.length <= MAX_FLAG_LINES ? flagged.map((f) => ({ type: "line", xref: "x", x0: f.x, x1: f.x, yref: "paper", y0: 0, y1: 1,
        line: { color: f.color, width: 1, dash: "dot" }, opacity: 0.55, layer: "below" })) : []),
    ],
    annotations: panels.flatMap((panel, i) => panel.title ? [{ xref: "paper", x: 0, xanchor: "left", yref: "paper", y: domains[i][1],
      yanchor: "bottom", text: panel.title, showarrow: false, font: { size: 10, color: muted } }] : []),
  };
  panels.forEach((panel, i) => {
    const fixed = constantRange(panelValues[i], options.logY);
    layout[i === 0 ? "yaxis" : `yaxis${i + 1}`] = {
      gridcolor: grid, zeroline: false, type: options.logY ? "log" : "linear", ...axisNumbers(maxAbs(panelValues[i].flat())), automargin: true,
      domain: domains[i], anchor: "x", ...(panel.percent && !options.logY ? PERCENT_AXIS : {}),
      ...(fixed ? { range: fixed, autorange: false } : {}),
    };
  });
  if (flagKeys.length) {
    layout[`yaxis${panels.length + 1}`] = { overlaying: axisId(panels.length - 1), visible: false, range: [0, 1], fixedrange: true, autorange: false };
  }
  // every value 0 (GRPO's single on-policy update): the flat line is right; the chart says why
  const flatZero = def.zeroNote && keys.every((key) => runs.every((r) => (seriesOf(r.id, key)?.values ?? []).every((v) => v === 0 || Number.isNaN(v))))
    ? def.zeroNote : undefined;
  // a new smoothing weight changes every y without changing the style: redraw, not append
  const resetKey = [[...hidden].join("|"), store.epoch, options.smoothing, options.xAxis, runs.map((r) => r.id).join("."),
    styleKey(traces, layout as Layout)].join(";");
  return (
    <ChartCard def={def} traces={traces} layout={layout as Layout} resetKey={resetKey} legend={legend} hidden={hidden} toggle={toggle}
      note={flatZero} onPointClick={onPointClick ? (p) => {
        const idx = traces.findIndex((t) => t.name === p.traceName);
        const step = typeof p.customdata === "number" ? p.customdata : Number(p.x);
        if (idx !== -1 && Number.isFinite(step)) onPointClick(traceRun[idx], step);
      } : undefined} />
  );
}
