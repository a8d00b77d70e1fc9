"""64-bit integers on PostgreSQL: every integer column (ids, steps, indices, sizes) and the id sequences. The API
takes integers up to 64 bits (steps up to 2**62); PostgreSQL's INTEGER is 32 bits ("integer out of range").
SQLite's INTEGER is 64 bits already: nothing to do there. On PostgreSQL each table is rewritten once.

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

COLUMNS = {
    'event': ['id'],
    'experiment': ['id'],
    'run': ['id', 'experiment_id', 'progress_step', 'progress_total', 'parent_id'],
    'artifact': ['id', 'run_id', 'step', 'size_bytes'],
    'log_line': ['id', 'run_id', 'seq'],
    'metric_point': ['run_id', 'step'],
    'metric_bucket': ['run_id', 'level', 'bucket', 'n', 'min_step', 'max_step', 'nan_step'],
    'sample': ['id', 'run_id', 'step', 'sample_index', 'prompt_index', 'num_turns'],
}
SERIAL = ['event', 'experiment', 'run', 'artifact', 'log_line', 'sample']  # tables whose id has a sequence


def _retype(kind: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != 'postgresql':
        return
    for table, columns in COLUMNS.items():
        # one ALTER TABLE per table: one rewrite of it, foreign keys and indexes kept
        op.execute(f'ALTER TABLE "{table}" ' + ', '.join(f'ALTER COLUMN "{c}" TYPE {kind}' for c in columns))
    for table in SERIAL:
        sequence = bind.execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {'t': table}).scalar()
        if sequence:
            op.execute(f'ALTER SEQUENCE {sequence} AS {kind}')


def upgrade() -> None:
    _retype('BIGINT')


def downgrade() -> None:
    _retype('INTEGER')  # fails, changing nothing, if a value no longer fits in 32 bits
