"""Initial schema: experiments, runs, metric points, samples, log lines, artifacts, events.

Revision ID: 0001
Revises: 
Create Date: 2026-12-02 17:34:40.044580
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('channel', sa.String(length=40), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('time', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_event_channel'), ['channel'], unique=False)

    op.create_table('experiment',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.String(length=10000), nullable=True),
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('experiment', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_experiment_name'), ['name'], unique=True)

    op.create_table('run',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('tags', sa.JSON(), nullable=False),
    sa.Column('notes', sa.String(length=100000), nullable=False),
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('experiment_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.Enum('queued', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost', name='runstatus'), nullable=False),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('preset', sa.String(), nullable=True),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('resolved_config', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=True),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.Column('progress_step', sa.Integer(), nullable=True),
    sa.Column('progress_total', sa.Integer(), nullable=True),
    sa.Column('eta_seconds', sa.Float(), nullable=True),
    sa.Column('error', sa.String(), nullable=True),
    sa.Column('log_tail', sa.String(), nullable=True),
    sa.Column('submission_id', sa.String(), nullable=True),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('parent_relation', sa.String(), nullable=True),
    sa.Column('ingest_token_hash', sa.String(length=128), nullable=False),
    sa.Column('run_dir', sa.String(), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiment.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['parent_id'], ['run.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_experiment_id'), ['experiment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_submission_id'), ['submission_id'], unique=False)

    op.create_table('artifact',
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('path', sa.String(length=1000), nullable=False),
    sa.Column('step', sa.Integer(), nullable=True),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'path', name='uq_artifact_path')
    )
    with op.batch_alter_table('artifact', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_artifact_run_id'), ['run_id'], unique=False)

    op.create_table('log_line',
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('time', sa.Float(), nullable=False),
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'source', 'seq', name='uq_log_line_position')
    )
    with op.batch_alter_table('log_line', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_log_line_run_id'), ['run_id'], unique=False)

    op.create_table('metric_point',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=300), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('wall_time', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'key', 'step')
    )
    op.create_table('sample',
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('split', sa.Text(), nullable=False),
    sa.Column('sample_index', sa.Integer(), nullable=False),
    sa.Column('prompt_index', sa.Integer(), nullable=True),
    sa.Column('group_uid', sa.String(length=200), nullable=True),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('response', sa.Text(), nullable=False),
    sa.Column('score', sa.Float(), nullable=True),
    sa.Column('reward', sa.Float(), nullable=True),
    sa.Column('ground_truth', sa.Text(), nullable=True),
    sa.Column('data_source', sa.String(length=200), nullable=True),
    sa.Column('tokens', sa.JSON(), nullable=True),
    sa.Column('old_log_probs', sa.JSON(), nullable=True),
    sa.Column('ref_log_probs', sa.JSON(), nullable=True),
    sa.Column('advantages', sa.JSON(), nullable=True),
    sa.Column('values', sa.JSON(), nullable=True),
    sa.Column('extras', sa.JSON(), nullable=False),
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('wall_time', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'split', 'step', 'sample_index', name='uq_sample_position')
    )
    with op.batch_alter_table('sample', schema=None) as batch_op:
        batch_op.create_index('ix_sample_run_prompt', ['run_id', 'prompt_index'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('sample', schema=None) as batch_op:
        batch_op.drop_index('ix_sample_run_prompt')

    op.drop_table('sample')
    op.drop_table('metric_point')
    with op.batch_alter_table('log_line', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_log_line_run_id'))

    op.drop_table('log_line')
    with op.batch_alter_table('artifact', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_artifact_run_id'))

    op.drop_table('artifact')
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_submission_id'))
        batch_op.drop_index(batch_op.f('ix_run_status'))
        batch_op.drop_index(batch_op.f('ix_run_experiment_id'))

    op.drop_table('run')
    with op.batch_alter_table('experiment', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_experiment_name'))

    op.drop_table('experiment')
    with op.batch_alter_table('event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_event_channel'))

    op.drop_table('event')
    sa.Enum(name='runstatus').drop(op.get_bind(), checkfirst=True)  # a real type on PostgreSQL
