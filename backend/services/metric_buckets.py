"""Pre-aggregated metric buckets (SQLite): what makes a chart of a 100,000-step series cost a few hundred rows.

Level L (L in LEVELS) cuts a series (run, key) into buckets of 2**L steps; each bucket row holds its point
count, its min row, its max row and its first NaN row (step, value, wall time). Level 4 is computed from the
points, every coarser level from the level below it (8 child rows per bucket). Ingest folds a batch of new
steps into the buckets it falls in (merge_new) and recomputes them after a rewrite or a NaN (refresh); a chart
query picks the coarsest level whose buckets are still narrower than its own and merges those rows into its buckets, keeping each one's min and max (and NaN) rows, so the result equals downsampling
the raw points with bucket edges rounded to the level's grid.

Plain SQL through a DB-API-style `execute(sql, params) -> rows` so the same code serves the app's sessions,
the Alembic migration (backfill) and scripts that seed a database file directly.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

LEVELS = (4, 7, 10, 13, 16, 19, 22)  # bucket widths 16, 128, ... 4M steps
TOP = LEVELS[-1]

Execute = Callable[[str, Sequence], list]

_COLS = ("run_id, level, \"key\", bucket, n, min_step, min_value, min_wall, max_step, max_value, max_wall, "
         "nan_step, nan_wall")


def _from_points(where: str, level: int) -> str:
    """Buckets of `level` from metric_point rows matching `where` (SQLite: the other columns of a query with a
    lone MIN()/MAX() come from the row holding it)."""
    b = f"step >> {level}"
    return f"""
INSERT OR REPLACE INTO metric_bucket ({_COLS})
SELECT a.run_id, {level}, a."key", a.b, a.n, a.step, a.v, a.w, m.step, m.v, m.w, z.step, z.w
FROM (SELECT run_id, "key", {b} AS b, COUNT(*) AS n, step, MIN(value) AS v, wall_time AS w
      FROM metric_point WHERE {where} GROUP BY run_id, "key", b) AS a
JOIN (SELECT run_id, "key", {b} AS b, step, MAX(value) AS v, wall_time AS w
      FROM metric_point WHERE {where} GROUP BY run_id, "key", b) AS m
  ON m.run_id = a.run_id AND m."key" = a."key" AND m.b = a.b
LEFT JOIN (SELECT run_id, "key", {b} AS b, MIN(step) AS step, wall_time AS w
      FROM metric_point WHERE {where} AND value IS NULL GROUP BY run_id, "key", b) AS z
  ON z.run_id = a.run_id AND z."key" = a."key" AND z.b = a.b"""


def _from_level(where: str, child: int, level: int) -> str:
    b = f"bucket >> {level - child}"
    w = f"level = {child} AND {where}"
    return f"""
INSERT OR REPLACE INTO metric_bucket ({_COLS})
SELECT a.run_id, {level}, a."key", a.b, a.n, a.step, a.v, a.w, m.step, m.v, m.w, z.step, z.w
FROM (SELECT run_id, "key", {b} AS b, SUM(n) AS n, min_step AS step, MIN(min_value) AS v, min_wall AS w
      FROM metric_bucket WHERE {w} GROUP BY run_id, "key", b) AS a
JOIN (SELECT run_id, "key", {b} AS b, max_step AS step, MAX(max_value) AS v, max_wall AS w
      FROM metric_bucket WHERE {w} GROUP BY run_id, "key", b) AS m
  ON m.run_id = a.run_id AND m."key" = a."key" AND m.b = a.b
LEFT JOIN (SELECT run_id, "key", {b} AS b, MIN(nan_step) AS step, nan_wall AS w
      FROM metric_bucket WHERE {w} AND nan_step IS NOT NULL GROUP BY run_id, "key", b) AS z
  ON z.run_id = a.run_id AND z."key" = a."key" AND z.b = a.b"""


def rebuild(execute: Execute, run_ids: Iterable[int] | None = None) -> None:
    """Every level of the given runs (all runs when None) from their points: the migration's backfill, and
    for scripts that write metric_point directly."""
    ids = None if run_ids is None else [int(i) for i in run_ids]
    if ids is not None and not ids:
        return
    where = "1" if ids is None else f"run_id IN ({', '.join(map(str, ids))})"
    execute(f"DELETE FROM metric_bucket WHERE {where}", ())
    execute(_from_points(where, LEVELS[0]), ())
    for child, level in zip(LEVELS, LEVELS[1:]):
        execute(_from_level(where, child, level), ())


def refresh(execute: Execute, run_id: int, ranges: dict[tuple[int, int], list[str]]) -> None:
    """After an upsert: recompute the buckets of every level that the steps [lo, hi] of `keys` fall in.
    `ranges` maps (lo, hi) to the keys written over that step range (a training step logs every key at
    once, so a batch usually has one range)."""
    for (lo, hi), key_list in ranges.items():
        for i in range(0, len(key_list), 500):
            keys = key_list[i:i + 500]
            marks = ", ".join("?" * len(keys))
            level = LEVELS[0]
            first, last = (lo >> level) << level, (((hi >> level) + 1) << level) - 1
            execute(_from_points(f'run_id = {int(run_id)} AND "key" IN ({marks}) AND step BETWEEN ? AND ?', level),
                    (*keys, first, last) * 3)
            for child, level in zip(LEVELS, LEVELS[1:]):
                shift = level - child
                first = (lo >> level) << shift
                last = (((hi >> level) + 1) << shift) - 1
                execute(_from_level(f'run_id = {int(run_id)} AND "key" IN ({marks}) AND bucket BETWEEN ? AND ?',
                                    child, level), (*keys, first, last) * 3)


def only_new_points(execute: Execute, run_id: int, ranges: dict[tuple[int, int], list[str]]) -> bool:
    """True when none of `keys` has a stored point within its batch's steps [lo, hi] (checked before the
    upsert): then every point of the batch is new and merge_new() can fold it into the buckets as they are."""
    for (lo, hi), key_list in ranges.items():
        for i in range(0, len(key_list), 500):
            keys = key_list[i:i + 500]
            marks = ", ".join("?" * len(keys))
            if execute(f'SELECT 1 FROM metric_point WHERE run_id = {int(run_id)} AND "key" IN ({marks}) '
                       "AND step BETWEEN ? AND ? LIMIT 1", (*keys, lo, hi)):
                return False
    return True


def _fold(into: list, n: int, lo: tuple, hi: tuple) -> None:
    """Fold a count, a min row and a max row (step, value, wall) into an aggregate [n, min row, max row];
    ties go to the lower step, as in the SQL above (it keeps the first row in step order)."""
    into[0] += n
    if lo[1] < into[1][1] or (lo[1] == into[1][1] and lo[0] < into[1][0]):
        into[1] = lo
    if hi[1] > into[2][1] or (hi[1] == into[2][1] and hi[0] < into[2][0]):
        into[2] = hi


def _merge_sql(run_id: int) -> str:
    better_min = ("min_value IS NULL OR excluded.min_value < min_value OR "
                  "(excluded.min_value = min_value AND excluded.min_step < min_step)")
    better_max = ("max_value IS NULL OR excluded.max_value > max_value OR "
                  "(excluded.max_value = max_value AND excluded.max_step < max_step)")
    sets = ["n = n + excluded.n"] + [
        f"{side}_{col} = CASE WHEN {cond} THEN excluded.{side}_{col} ELSE {side}_{col} END"
        for side, cond in (("min", better_min), ("max", better_max)) for col in ("step", "value", "wall")]
    return (f"INSERT INTO metric_bucket ({_COLS}) VALUES ({int(run_id)}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL) "
            f'ON CONFLICT (run_id, level, "key", bucket) DO UPDATE SET {", ".join(sets)}')


def merge_new(executemany: Callable[[str, list], object], run_id: int, rows: Iterable[tuple]) -> None:
    """Fold points that are all new to their series (only_new_points() said so) and hold no NaN into the
    buckets of every level, without reading the points back: each touched bucket's count grows and its min
    and max rows are kept or replaced. `rows` are (key, step, value, wall_time). The result equals refresh()'s
    (same tie rule), at a fraction of its cost when a batch appends steps, as a training run's logger does."""
    level = LEVELS[0]
    buckets: dict[tuple[str, int], list] = {}
    for key, step, value, wall in rows:  # _fold() inlined: this loop runs once per point
        agg = buckets.get((key, step >> level))
        if agg is None:
            point = (step, value, wall)
            buckets[(key, step >> level)] = [1, point, point]
            continue
        agg[0] += 1
        lo, hi = agg[1], agg[2]
        if value < lo[1] or (value == lo[1] and step < lo[0]):
            agg[1] = (step, value, wall)
        if value > hi[1] or (value == hi[1] and step < hi[0]):
            agg[2] = (step, value, wall)
    out = []
    for coarser in LEVELS[1:] + (None,):
        out.extend((level, key, b, n, *lo, *hi) for (key, b), (n, lo, hi) in buckets.items())
        if coarser is None:
            break
        shift, parents = coarser - level, {}
        for (key, b), (n, lo, hi) in buckets.items():
            agg = parents.get((key, b >> shift))
            if agg is None:
                parents[(key, b >> shift)] = [n, lo, hi]
            else:
                _fold(agg, n, lo, hi)
        buckets, level = parents, coarser
    executemany(_merge_sql(run_id), out)


def keys(execute: Execute, run_ids: list[int]) -> list[str]:
    """Every key of these runs: the top level holds one row per series (and few rows in all)."""
    marks = ", ".join("?" * len(run_ids))
    return [r[0] for r in execute(f'SELECT DISTINCT "key" FROM metric_bucket WHERE level = {TOP} '
                                  f'AND run_id IN ({marks}) ORDER BY "key"', tuple(run_ids))]


def total(execute: Execute, run_id: int, key: str) -> int:
    rows = execute(f'SELECT SUM(n) FROM metric_bucket WHERE run_id = ? AND level = {TOP} AND "key" = ?',
                   (run_id, key))
    return int(rows[0][0] or 0) if rows else 0


def pick_level(span: int, buckets: int) -> int | None:
    """The coarsest level whose buckets are no wider than the chart's (span / buckets steps), or None when even
    level 4 is too coarse (then the raw points are few enough to read)."""
    width = span / max(1, buckets)
    fit = [lv for lv in LEVELS if (1 << lv) <= width]
    return fit[-1] if fit else None


def downsample(execute: Execute, run_id: int, key: str, lo: int, hi: int, max_points: int) -> list[tuple]:
    """(step, value, wall_time) rows, at most max_points, in step order: the first and last point, every
    chart bucket's min and max row, and one NaN row per bucket that has one. Steps [lo, hi] must be the whole
    series (the buckets at the edges hold no points outside it)."""
    span = hi - lo + 1
    where = f'run_id = ? AND level = ? AND "key" = ?'
    picked: dict[int, tuple] = {}
    nan_buckets = max(1, max_points // 4)
    level = pick_level(span, nan_buckets)
    if level is not None:
        for step, wall in execute(
                f"SELECT MIN(nan_step), nan_wall FROM metric_bucket WHERE {where} AND nan_step IS NOT NULL "
                f"GROUP BY ((bucket << {level}) - ?) * ? / ?", (run_id, level, key, lo, nan_buckets, span)):
            picked[step] = (step, None, wall)
    buckets = max(1, (max_points - len(picked) - 2) // 2)
    level = pick_level(span, buckets)
    if level is None:
        return []  # caller reads points
    for agg, col in (("MIN", "min"), ("MAX", "max")):
        for step, value, wall in execute(
                f"SELECT {col}_step, {agg}({col}_value), {col}_wall FROM metric_bucket WHERE {where} "
                f"AND {col}_value IS NOT NULL GROUP BY ((bucket << {level}) - ?) * ? / ?",
                (run_id, level, key, lo, buckets, span)):
            picked.setdefault(step, (step, value, wall))
    for order in ("ASC", "DESC"):
        for row in execute(f'SELECT step, value, wall_time FROM metric_point WHERE run_id = ? AND "key" = ? '
                           f"ORDER BY step {order} LIMIT 1", (run_id, key)):
            picked[row[0]] = tuple(row)
    return [picked[s] for s in sorted(picked)]


# ------------------------------------------------------------------------------------------------ the app's sessions
def in_use(session) -> bool:
    """SQLite keeps pre-aggregated buckets (metric_bucket); other databases downsample in numpy."""
    return session.get_bind().dialect.name == "sqlite"


def executor_of(session):
    conn = session.connection()

    def execute(sql: str, params=()):
        result = conn.exec_driver_sql(sql, tuple(params)) if params else conn.exec_driver_sql(sql)
        return result.all() if result.returns_rows else []
    return execute
