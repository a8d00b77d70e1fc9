import { defineConfig, type Plugin } from "vitest/config";
import react from "@vitejs/plugin-react";

/** The prefetcher (src/prefetchNow.ts) as a small chunk of its own, loaded by an async script ahead of the app's
 *  bundle: its requests leave once it is fetched, not after the whole bundle is fetched and compiled. */
function prefetchFirst(): Plugin {
  return {
    name: "rlstudio-prefetch-first",
    apply: "build",
    transformIndexHtml: {
      order: "post",
      handler(html, ctx) {
        const chunk = Object.values(ctx.bundle ?? {}).find((c) => c.type === "chunk" && c.isEntry && c.name === "prefetch");
        if (!chunk) return html;
        return html.replace("<head>", `<head>\n    <script type="module" async crossorigin src="/${chunk.fileName}"></script>`);
      },
    },
  };
}

// `npm run dev` proxies /api to a backend on :8000 (python -m backend).
export default defineConfig({
  plugins: [react(), prefetchFirst()],
  server: { proxy: { "/api": "http://127.0.0.1:8000", "/healthz": "http://127.0.0.1:8000" } },
  build: {
    outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 8000,
    rollupOptions: { input: { index: "index.html", prefetch: "src/prefetchNow.ts" } },
  },
  test: { include: ["src/**/*.test.ts"], environment: "node" },
});
