/** index.html's first script: Vite puts it at the head of the app's bundle, so it runs before the rest is
 *  evaluated and React renders, and sends the page's first requests (api/prefetch.ts). Only the Compare page
 *  prefetches today. */
import { prefetchCompare } from "./pages/compare/prefetch";

prefetchCompare();
