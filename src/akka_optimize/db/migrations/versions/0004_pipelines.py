"""pipelines: a pipeline descriptor's stages and state

Revision ID: 0004_pipelines
Revises: 0003_endpoint_queued_at
Create Date: 2026-12-02 05:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0004_pipelines"
down_revision = "0003_endpoint_queued_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipelines",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("submission_id", sa.String(length=128), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("descriptor", sa.JSON(), nullable=False),
        sa.Column("stages", sa.JSON(), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipelines")),
        sa.UniqueConstraint(
            "project", "submission_id", name=op.f("uq_pipelines_project_submission_id")
        ),
    )
    with op.batch_alter_table("pipelines", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pipelines_project"), ["project"], unique=False)
        batch_op.create_index(batch_op.f("ix_pipelines_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("pipelines", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pipelines_state"))
        batch_op.drop_index(batch_op.f("ix_pipelines_project"))
    op.drop_table("pipelines")
