/** Every view is a URL: filters, steps, chart options and selections live in the path and query string. */
import { createBrowserRouter } from "react-router-dom";
import { Layout } from "./components/Layout";
import { ChangesPage } from "./pages/changes/ChangesPage";
import { ComparePage } from "./pages/compare/ComparePage";
import { ImportPage } from "./pages/import/ImportPage";
import { NewRunPage } from "./pages/new-run/NewRunPage";
import { RunPage } from "./pages/run/RunPage";
import { RunsPage } from "./pages/runs/RunsPage";
import { SamplesPage } from "./pages/samples/SamplesPage";
import { SettingsPage } from "./pages/settings/SettingsPage";
import { SideBySidePage } from "./pages/side-by-side/SideBySidePage";
import { NotFound } from "./components/Layout";

export const router = createBrowserRouter([
  {
    element: <Layout />,
    children: [
      { path: "/", element: <RunsPage /> },
      { path: "/runs/new", element: <NewRunPage /> },
      { path: "/runs/import", element: <ImportPage /> },
      { path: "/runs/:runId", element: <RunPage /> },
      { path: "/runs/:runId/samples", element: <SamplesPage /> },
      { path: "/runs/:runId/changes", element: <ChangesPage /> },
      { path: "/side-by-side", element: <SideBySidePage /> },
      { path: "/compare", element: <ComparePage /> },
      { path: "/settings", element: <SettingsPage /> },
      { path: "*", element: <NotFound /> },
    ],
  },
]);
