import { Link, NavLink, Outlet } from "react-router-dom";
import { Empty } from "./States";

export function Layout() {
  return (
    <div className="app">
      <a className="skip-link" href="#main">Skip to content</a>
      <header className="topbar">
        <Link to="/" className="brand">rl<span>studio</span></Link>
        <nav aria-label="main">
          <NavLink to="/" end>Runs</NavLink>
          <NavLink to="/runs/new">New run</NavLink>
          <NavLink to="/compare">Compare</NavLink>
          <NavLink to="/side-by-side">Side by side</NavLink>
        </nav>
        <NavLink to="/settings" className="docs-link" title="API token">Settings</NavLink>
        <a href="/docs">API</a>
      </header>
      <main id="main" tabIndex={-1}>
        <Outlet />
      </main>
    </div>
  );
}

export function NotFound() {
  return <Empty title="Page not found"><Link to="/">Back to the runs</Link></Empty>;
}

export function PageTitle({ children, actions }: { children: React.ReactNode; actions?: React.ReactNode }) {
  return (
    <div className="page-title">
      <h1>{children}</h1>
      {actions && <div className="actions">{actions}</div>}
    </div>
  );
}
