/** What every chart of the grid shares: its card (HTML title and legend, see MetricCharts), the legend's glyphs,
 *  show / hide state, and the Plotly layout all of them start from. */
import { useState, type ReactNode } from "react";
import type { ChartDef } from "../../lib/charts";
import { Plot, type Trace } from "../Plot";

export interface RunRef {
  id: number;
  name: string;
}

export type Layout = Partial<import("plotly.js-basic-dist-min").Layout>;

export const PLOT_HEIGHT = 230;
export const MARGIN = { l: 48, r: 12, t: 8, b: 28 };

const DASHES: Record<string, string> = { dot: "2 3", dash: "6 3", dashdot: "6 3 2 3" };

export interface LegendItem {
  /** what show / hide toggles: the trace's name, or "run:<id>" / "key:<key>" for a whole run or key */
  name: string;
  /** what the entry reads, when not `name` */
  label?: string;
  color: string;
  dash: string;
  glyph: "line" | "marker" | "bar";
  /** after the name, muted: "= actor/lr", "2 steps", "38%" */
  note?: string;
}

export function useHidden(): [ReadonlySet<string>, (name: string) => void] {
  const [hidden, setHidden] = useState<ReadonlySet<string>>(new Set());
  const toggle = (name: string) => setHidden((prev) => {
    const next = new Set(prev);
    if (next.has(name)) next.delete(name);
    else next.add(name);
    return next;
  });
  return [hidden, toggle];
}

export function baseLayout(dark: boolean) {
  const fg = dark ? "#d7dce2" : "#1f2933";
  return {
    fg,
    muted: dark ? "#9aa5b1" : "#52606d",
    grid: dark ? "#2e3640" : "#e6e9ee",
    layout: {
      margin: MARGIN,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: fg, size: 11 },
      showlegend: false,
      hovermode: "x unified",
      // the unified hover box takes the paper's colour, transparent here: it would show the lines through it
      hoverlabel: { bgcolor: dark ? "#1b2129" : "#ffffff", bordercolor: dark ? "#46505c" : "#c9ced6", font: { color: fg, size: 11 } },
    },
  };
}

/** Style only (no data): a change redraws the chart, growth alone appends points (Plot's resetKey). */
export function styleKey(traces: Trace[], layout: Layout): string {
  return JSON.stringify([layout, traces.map(({ x: _x, y: _y, customdata: _c, text: _t, ...style }) => style)]);
}

export function ChartCard({ def, traces, layout, resetKey, legend, hidden, toggle, onPointClick, titleExtra, note }: {
  def: ChartDef; traces: Trace[]; layout: Layout; resetKey: string; legend: LegendItem[]; hidden: ReadonlySet<string>;
  toggle: (name: string) => void; onPointClick?: (p: { x: unknown; y: unknown; customdata: unknown; traceName: string }) => void;
  titleExtra?: ReactNode;
  /** a sentence under the title (why a flat line is right) */
  note?: string;
}) {
  return (
    <section className="card chart-card" data-chart={def.id} data-points={traces.reduce((n, t) => n + t.x.length, 0)}>
      <h3 className="chart-title">{def.title}{titleExtra}</h3>
      {note && <p className="small muted chart-note" role="note" data-chart-note>{note}</p>}
      <Plot traces={traces} layout={layout} resetKey={resetKey} ariaLabel={def.title} height={PLOT_HEIGHT} onPointClick={onPointClick} />
      <ul className="chart-legend" aria-label={`${def.title} legend`}>
        {legend.map((l) => (
          <li key={l.name} data-legend={l.label ?? l.name}>
            <button type="button" className="link-like" aria-pressed={!hidden.has(l.name)} title="show / hide"
              onClick={() => toggle(l.name)}>
              <LegendGlyph item={l} />
              {l.label ?? l.name}
              {l.note && <span className="legend-note">{l.note}</span>}
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}

function LegendGlyph({ item }: { item: LegendItem }) {
  if (item.glyph === "marker") {
    return <svg width="22" height="10" aria-hidden><polygon points="11,1 16,9 6,9" fill={item.color} /></svg>;
  }
  if (item.glyph === "bar") return <svg width="14" height="10" aria-hidden><rect x="1" y="0" width="12" height="10" rx="1.5" fill={item.color} /></svg>;
  return (
    <svg width="22" height="8" aria-hidden><line x1="1" y1="4" x2="21" y2="4" stroke={item.color} strokeWidth="2.2"
      strokeDasharray={DASHES[item.dash] ?? undefined} /></svg>
  );
}
