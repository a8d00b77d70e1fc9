"""Webhooks (issue 35): `webhook` (an experiment's or a run's subscription: URL, form, events, token) and
`webhook_delivery` (each event sent to each webhook: the outbox the server's sender works through, and the run's
delivery log). New tables: existing data is untouched.

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    op.create_table(
        'webhook',
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('format', sa.String(length=10), nullable=False),
        sa.Column('events', sa.JSON(), nullable=False),
        sa.Column('enabled', sa.Boolean(), nullable=False),
        sa.Column('id', BIGINT, nullable=False),
        sa.Column('experiment_id', BIGINT, nullable=True),
        sa.Column('run_id', BIGINT, nullable=True),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('token', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['experiment_id'], ['experiment.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table('webhook') as batch:
        batch.create_index('ix_webhook_experiment_id', ['experiment_id'], unique=False)
        batch.create_index('ix_webhook_run_id', ['run_id'], unique=False)
    op.create_table(
        'webhook_delivery',
        sa.Column('id', BIGINT, nullable=False),
        sa.Column('webhook_id', BIGINT, nullable=True),
        sa.Column('run_id', BIGINT, nullable=False),
        sa.Column('event', sa.String(length=40), nullable=False),
        sa.Column('payload', sa.JSON(), nullable=False),
        sa.Column('url_masked', sa.Text(), nullable=False),
        sa.Column('state', sa.String(length=10), nullable=False),
        sa.Column('attempts', BIGINT, nullable=False),
        sa.Column('next_attempt_at', sa.Float(), nullable=True),
        sa.Column('last_status', BIGINT, nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('delivered_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['webhook_id'], ['webhook.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table('webhook_delivery') as batch:
        batch.create_index('ix_webhook_delivery_due', ['state', 'next_attempt_at'], unique=False)
        batch.create_index('ix_webhook_delivery_run_id', ['run_id'], unique=False)


def downgrade() -> None:
    op.drop_table('webhook_delivery')
    op.drop_table('webhook')
