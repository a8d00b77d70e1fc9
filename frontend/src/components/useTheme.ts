import { useEffect, useState } from "react";

/** Follows the system's light/dark scheme (CSS does the page; this is for Plotly's colors). */
export function useDark(): boolean {
  const query = typeof window !== "undefined" ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  const [dark, setDark] = useState(query?.matches ?? false);
  useEffect(() => {
    if (!query) return;
    const fn = (e: MediaQueryListEvent) => setDark(e.matches);
    query.addEventListener("change", fn);
    return () => query.removeEventListener("change", fn);
  }, [query]);
  return dark;
}

export const PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d", "#ff9da6", "#bab0ac"];
