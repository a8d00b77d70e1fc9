/** Number and time formatting shared by the pages. */
export function fmtNum(v: number | null | undefined, digits = 4): string {
  if (v === null || v === undefined) return "—";
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "Inf" : "-Inf";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

export function fmtDate(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

export function secondsBetween(a: string | null | undefined, b: string | null | undefined): number | null {
  if (!a) return null;
  const end = b ? new Date(b).getTime() : Date.now();
  return (end - new Date(a).getTime()) / 1000;
}
