/** The Compare page's first requests (api/prefetch.ts), sent before the app's bundle is fetched and compiled: the
 *  build makes this a small chunk of its own that index.html loads first, async (vite.config.ts). Only the
 *  Compare page prefetches today. */
import { prefetchCompare } from "./pages/compare/prefetch";

prefetchCompare();
