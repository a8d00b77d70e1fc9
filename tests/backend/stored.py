"""What the database holds, as one digest: equal digests before and after a request = nothing stored changed."""
from __future__ import annotations

import hashlib

from sqlalchemy import inspect, text


def stored(client) -> str:
    """A digest of every row of every table of the app behind a TestClient."""
    digest = hashlib.sha256()
    with client.app.state.engine.connect() as conn:
        for table in sorted(inspect(conn).get_table_names()):
            for row in conn.execute(text(f'SELECT * FROM "{table}" ORDER BY 1')):
                digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()
