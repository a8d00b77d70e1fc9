"""Pre-aggregated metric buckets (fast charts of long series), filled from the existing points.

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('metric_bucket',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('level', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=300), nullable=False),
    sa.Column('bucket', sa.Integer(), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('min_step', sa.Integer(), nullable=True),
    sa.Column('min_value', sa.Float(), nullable=True),
    sa.Column('min_wall', sa.Float(), nullable=True),
    sa.Column('max_step', sa.Integer(), nullable=True),
    sa.Column('max_value', sa.Float(), nullable=True),
    sa.Column('max_wall', sa.Float(), nullable=True),
    sa.Column('nan_step', sa.Integer(), nullable=True),
    sa.Column('nan_wall', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'level', 'key', 'bucket'),
    sqlite_with_rowid=False,
    )
    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        from backend.services import metric_buckets

        def execute(sql, params=()):
            result = bind.exec_driver_sql(sql, tuple(params)) if params else bind.exec_driver_sql(sql)
            return result.all() if result.returns_rows else []
        metric_buckets.rebuild(execute)


def downgrade() -> None:
    op.drop_table('metric_bucket')
