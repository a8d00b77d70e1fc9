"""Run facts (issue 27): what the engine reports when a run starts (device, workers, the actor's trainable and
total parameters), kept on the run for the run page.

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('run') as batch:
        batch.add_column(sa.Column('facts', sa.JSON(), nullable=False, server_default=sa.text("'{}'")))


def downgrade() -> None:
    with op.batch_alter_table('run') as batch:
        batch.drop_column('facts')
