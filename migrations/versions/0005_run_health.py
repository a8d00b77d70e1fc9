"""Run health (issue 28): each alarm's state per run, the checks' running state, and the per-prompt learning-signal
record (backend/models/health.py). Integers are BIGINT on PostgreSQL from the start (see 0004).

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

BigInt = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def _run_id() -> sa.Column:
    return sa.Column('run_id', BigInt, sa.ForeignKey('run.id', ondelete='CASCADE'), primary_key=True)


def upgrade() -> None:
    op.create_table(
        'health_alarm',
        _run_id(),
        sa.Column('alarm_id', sa.String(length=400), primary_key=True),
        sa.Column('severity', sa.String(length=10), nullable=False),
        sa.Column('state', sa.String(length=10), nullable=False),
        sa.Column('title', sa.Text(), nullable=False),
        sa.Column('detail', sa.Text(), nullable=False),
        sa.Column('key', sa.String(length=300), nullable=True),
        sa.Column('since_step', BigInt, nullable=False),
        sa.Column('cleared_step', BigInt, nullable=True),
        sa.Column('values', sa.JSON(), nullable=False),
        sa.Column('samples', sa.JSON(), nullable=True),
        sa.Column('updated_at', sa.Float(), nullable=False),
    )
    op.create_table(
        'health_state',
        _run_id(),
        sa.Column('checked_step', BigInt, nullable=True),
        sa.Column('data', sa.JSON(), nullable=False),
    )
    op.create_table(
        'health_prompt',
        _run_id(),
        sa.Column('prompt_index', BigInt, primary_key=True),
        sa.Column('groups', BigInt, nullable=False),
        sa.Column('with_signal', BigInt, nullable=False),
        sa.Column('last_step', BigInt, nullable=False),
    )


def downgrade() -> None:
    op.drop_table('health_prompt')
    op.drop_table('health_state')
    op.drop_table('health_alarm')
