import { defineConfig } from "@hey-api/openapi-ts";

// `npm run gen:client`: openapi.json (dumped from the backend's app factory) -> src/client/.
export default defineConfig({
  input: "openapi.json",
  output: { path: "src/client", format: false },
  plugins: ["@hey-api/client-fetch", "@hey-api/typescript", "@hey-api/sdk"],
});
