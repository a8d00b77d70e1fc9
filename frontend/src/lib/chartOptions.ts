/** The charts' view options, as a URL holds them (components/ChartControls.tsx edits them). */
export interface ChartOptions {
  smoothing: number;
  xAxis: "step" | "time";
  logY: boolean;
}

/** The chart options a URL asks for (smooth=, x=time, logy=1). */
export function chartOptionsOf(params: URLSearchParams): ChartOptions {
  return {
    smoothing: Math.min(0.99, Math.max(0, Number(params.get("smooth") ?? 0) || 0)),
    xAxis: params.get("x") === "time" ? "time" : "step",
    logY: params.get("logy") === "1",
  };
}
