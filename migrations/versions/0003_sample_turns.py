"""Multi-turn samples: the conversation (turns), the per-token loss mask, and the columns the turn / tool
filters read; filled from the extras where an earlier dashboard logger put turns and loss_mask.

Revision ID: 0003
Revises: 0002
"""
import json

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sample', schema=None) as batch_op:
        batch_op.add_column(sa.Column('turns', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('loss_mask', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('num_turns', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('tool_names', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('tool_error', sa.Boolean(), nullable=True))
    from backend.models.trajectory import lift_from_extras, summary

    bind = op.get_bind()
    # the JSON column as its text (PostgreSQL's json type has no LIKE)
    found = bind.execute(sa.text("SELECT id, tokens, extras FROM sample WHERE CAST(extras AS TEXT) LIKE '%\"turns\"%' "
                                 "OR CAST(extras AS TEXT) LIKE '%\"loss_mask\"%'")).all()
    for sid, tokens, extras in found:
        data = {"tokens": json.loads(tokens) if isinstance(tokens, str) else tokens,
                "extras": json.loads(extras) if isinstance(extras, str) else extras}
        try:
            data = lift_from_extras(data)
        except ValueError:
            continue  # turns this version cannot read stay in the extras
        derived = summary(data.get("turns"))
        bind.execute(sa.text("UPDATE sample SET turns = :turns, loss_mask = :mask, extras = :extras, "
                             "num_turns = :num_turns, tool_names = :tool_names, tool_error = :tool_error "
                             "WHERE id = :id"),
                     {"id": sid, "extras": json.dumps(data["extras"]),
                      "turns": None if data.get("turns") is None else json.dumps(data["turns"]),
                      "mask": None if data.get("loss_mask") is None else json.dumps(data["loss_mask"]),
                      **derived})


def downgrade() -> None:
    # Keep the conversations: fold turns, loss_mask and num_turns back into the extras, where the dashboard logger
    # of that version put them (and from where upgrade() lifts them again), before the columns go.
    bind = op.get_bind()
    found = bind.execute(sa.text("SELECT id, extras, turns, loss_mask, num_turns FROM sample "
                                 "WHERE turns IS NOT NULL OR loss_mask IS NOT NULL")).all()
    for sid, extras, turns, mask, num_turns in found:
        extras = (json.loads(extras) if isinstance(extras, str) else extras) or {}
        for key, value in (("turns", turns), ("loss_mask", mask)):
            if value is not None:
                extras[key] = json.loads(value) if isinstance(value, str) else value
        if num_turns is not None:
            extras["num_turns"] = num_turns
        bind.execute(sa.text("UPDATE sample SET extras = :extras WHERE id = :id"),
                     {"id": sid, "extras": json.dumps(extras)})
    with op.batch_alter_table('sample', schema=None) as batch_op:
        batch_op.drop_column('tool_error')
        batch_op.drop_column('tool_names')
        batch_op.drop_column('num_turns')
        batch_op.drop_column('loss_mask')
        batch_op.drop_column('turns')
