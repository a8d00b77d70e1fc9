"""Run and experiment ids are never handed out twice (issue 35): on SQLite an `INTEGER PRIMARY KEY` without
AUTOINCREMENT is the rowid, and a new row gets max(rowid) + 1, so deleting the newest run gave its id to the next
one (a bookmark or a script's saved id then pointed at another run). The two tables are rebuilt with AUTOINCREMENT
(batch mode copies every row, its indexes and foreign keys); SQLite then remembers the highest id ever used in
`sqlite_sequence`. PostgreSQL's id sequences never hand out a value twice: nothing to do there.

An id deleted before this migration ran (above the highest one left) may still be given once more: nothing
recorded it.

Revision ID: 0008
Revises: 0007
"""
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

TABLES = ('experiment', 'run')


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    for table in TABLES:
        with op.batch_alter_table(table, recreate='always', table_kwargs={'sqlite_autoincrement': autoincrement}):
            pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
