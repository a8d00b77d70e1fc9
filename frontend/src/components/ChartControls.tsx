/** Smoothing, x axis and log-y, kept in the URL so a view is a shareable link. */
import { useSearchParams } from "react-router-dom";
import { chartOptionsOf, type ChartOptions } from "../lib/chartOptions";
import { URL_CONTROL } from "../lib/urlControl";

export { chartOptionsOf, type ChartOptions };

export function useChartOptions(): [ChartOptions, (o: Partial<ChartOptions>) => void] {
  const [params, setParams] = useSearchParams();
  const options = chartOptionsOf(params);
  const set = (o: Partial<ChartOptions>) => {
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      const merged = { ...options, ...o };
      if (merged.smoothing > 0) next.set("smooth", String(merged.smoothing));
      else next.delete("smooth");
      if (merged.xAxis === "time") next.set("x", "time");
      else next.delete("x");
      if (merged.logY) next.set("logy", "1");
      else next.delete("logy");
      return next;
    }, URL_CONTROL);
  };
  return [options, set];
}

export function ChartControls({ options, onChange }: { options: ChartOptions; onChange: (o: Partial<ChartOptions>) => void }) {
  return (
    <div className="chart-controls" role="group" aria-label="chart options">
      <label>
        Smoothing <input type="range" min={0} max={0.99} step={0.01} value={options.smoothing} aria-label="smoothing"
          onChange={(e) => onChange({ smoothing: Number(e.target.value) })} />
        <span className="mono">{options.smoothing.toFixed(2)}</span>
      </label>
      <label>
        X axis{" "}
        <select value={options.xAxis} onChange={(e) => onChange({ xAxis: e.target.value as "step" | "time" })}>
          <option value="step">step</option>
          <option value="time">wall time</option>
        </select>
      </label>
      <label>
        <input type="checkbox" checked={options.logY} onChange={(e) => onChange({ logY: e.target.checked })} /> log y
      </label>
    </div>
  );
}
