/** Imported first by main.tsx: evaluated before the rest of the bundle, it sends the page's first requests
 *  (api/prefetch.ts). Only the Compare page prefetches today. */
import { prefetchCompare } from "./pages/compare/prefetch";

prefetchCompare();
