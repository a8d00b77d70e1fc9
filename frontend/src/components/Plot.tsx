/**
 * A thin React wrapper around Plotly. While `resetKey` stays the same and every trace only grew, new points
 * are appended with Plotly.extendTraces (no rebuild, so charts stay smooth while a run streams); anything else
 * redraws with Plotly.react. Plotly's basic bundle (scatter, bar, pie: 1.2 MB instead of 4.6 MB, a quarter
 * of the start-up work) is its own chunk, fetched when the app starts (`loadPlotly`) while the page asks the
 * API for its data; a chart marks itself `data-ready` once drawn.
 *
 * Plotly keeps the arrays it is handed (gd.data) and extendTraces appends to them: it gets copies, never the
 * caller's. A caller's array that grows in place (a live series' steps) would otherwise reach the chart twice,
 * once by the push and again as extendTraces' tail: x one longer than y, every later point a step early.
 */
import type * as PlotlyType from "plotly.js-basic-dist-min";
import { useEffect, useRef, useState } from "react";

type PlotlyModule = typeof PlotlyType;
let plotly: PlotlyModule | null = null;
let loading: Promise<PlotlyModule> | null = null;

export function loadPlotly(): Promise<PlotlyModule> {
  loading ??= import("plotly.js-basic-dist-min").then((m) => {
    plotly = ((m as unknown as { default?: PlotlyModule }).default ?? m) as PlotlyModule;
    return plotly;
  });
  return loading;
}

export interface Trace {
  name: string;
  x: (number | string | Date)[];
  y: (number | null)[];
  customdata?: number[];
  [attr: string]: unknown;
}

interface Props {
  traces: Trace[];
  layout: Partial<PlotlyType.Layout>;
  resetKey: string;
  height?: number;
  onPointClick?: (point: { x: unknown; y: unknown; customdata: unknown; traceName: string }) => void;
  ariaLabel?: string;
}

/** The trace with its own copies of the data arrays (see the module's comment). */
function owned(t: Trace): Trace {
  return { ...t, x: t.x.slice(), y: t.y.slice(), ...(t.customdata ? { customdata: t.customdata.slice() } : {}) };
}

const CONFIG: Partial<PlotlyType.Config> = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
/** The first draw without the mode bar (zoom, pan, PNG): building it is a third of a chart's first draw, ten times
 *  on the Compare page. A chart gets it when the pointer first comes over it (the bar only shows on hover). */
const QUIET: Partial<PlotlyType.Config> = { ...CONFIG, displayModeBar: false };

type PlotDiv = HTMLDivElement & {
  on?: (ev: string, fn: (e: PlotlyType.PlotMouseEvent) => void) => void;
  removeAllListeners?: (ev: string) => void;
  data?: PlotlyType.Data[];
  layout?: Partial<PlotlyType.Layout>;
};

export function Plot({ traces, layout, resetKey, height = 260, onPointClick, ariaLabel }: Props) {
  const el = useRef<HTMLDivElement>(null);
  const plotted = useRef<{ key: string; names: string[]; lengths: number[] } | null>(null);
  const clickRef = useRef(onPointClick);
  clickRef.current = onPointClick;
  const [, setLoaded] = useState(plotly !== null);
  const barShown = useRef(false);

  // clicks on points; bound again after a redraw that starts the plot afresh (Plotly then drops its listeners)
  const bindClick = (div: PlotDiv) => {
    div.removeAllListeners?.("plotly_click");
    div.on?.("plotly_click", (e) => {
      const p = e.points?.[0];
      if (p && clickRef.current) {
        clickRef.current({ x: p.x, y: p.y, customdata: p.customdata, traceName: String(p.data.name ?? "") });
      }
    });
  };

  const showModeBar = () => {
    const div = el.current as PlotDiv | null;
    if (barShown.current || !div || !plotly || div.dataset.ready !== "true" || !div.data) return;
    barShown.current = true;
    void plotly.react(div, div.data, div.layout ?? {}, CONFIG).then(() => bindClick(div));
  };

  useEffect(() => {
    const div = el.current;
    if (!div) return;
    const Plotly = plotly;
    if (!Plotly) {
      void loadPlotly().then(() => setLoaded(true));
      return;
    }
    const names = traces.map((t) => t.name);
    const lengths = traces.map((t) => t.x.length);
    const prev = plotted.current;
    const canExtend = prev !== null && prev.key === resetKey && prev.names.length === names.length &&
      prev.names.every((n, i) => n === names[i]) && lengths.every((n, i) => n >= prev.lengths[i]);
    if (canExtend) {
      const grown = traces.map((_, i) => i).filter((i) => lengths[i] > prev.lengths[i]);
      if (grown.length) {
        const tail = <T,>(arr: T[] | undefined, i: number) => (arr ?? []).slice(prev.lengths[i]);
        const update: Record<string, unknown[][]> = {
          x: grown.map((i) => tail(traces[i].x, i)),
          y: grown.map((i) => tail(traces[i].y, i)),
        };
        if (grown.every((i) => traces[i].customdata)) update.customdata = grown.map((i) => tail(traces[i].customdata, i));
        void Plotly.extendTraces(div, update as PlotlyType.Data, grown);
      }
    } else {
      const full = { ...layout, height, autosize: true };
      try {
        const start = performance.now();
        void Plotly.react(div, traces.map(owned) as PlotlyType.Data[], full, barShown.current ? CONFIG : QUIET).then(() => {
          div.dataset.ready = "true";
          performance.measure("plot", { start, detail: traces.length }); // tests/ui/bench_compare.py reads these
        });
      } catch (e) {
        console.error("chart failed to draw", e); // one broken chart must not take the page down
      }
    }
    plotted.current = { key: resetKey, names, lengths };
  });

  useEffect(() => {
    const div = el.current as PlotDiv | null;
    if (!div) return;
    const ready = setInterval(() => {
      if (typeof div.on !== "function") return;
      clearInterval(ready);
      bindClick(div);
    }, 50);
    return () => {
      clearInterval(ready);
      plotly?.purge(div);
    };
  }, []);

  return <div ref={el} className="plot" style={{ height }} role="img" aria-label={ariaLabel} onPointerEnter={showModeBar} />;
}
