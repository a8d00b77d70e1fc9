"""Asynchronous training (issue 29): each answer's per-token policy versions, its oldest and newest version and
verl's staleness at the trained step, as columns (the samples views filter by staleness).

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

COLUMNS = ('policy_version_min', 'policy_version_max', 'staleness', 'staleness_worst')


def upgrade() -> None:
    with op.batch_alter_table('sample') as batch:
        batch.add_column(sa.Column('policy_versions', sa.JSON(), nullable=True))
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sample') as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
        batch.drop_column('policy_versions')
