"""adapter_imports: training adapters import's progress and outcome (issue 54 item 6)

Revision ID: 0005_adapter_imports
Revises: 0004_pipelines
Create Date: 2026-12-06 04:15:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0005_adapter_imports"
down_revision = "0004_pipelines"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adapter_imports",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("namespace", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("base_model", sa.String(length=512), nullable=False),
        sa.Column("alias", sa.String(length=128), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("progress", sa.String(length=512), nullable=False),
        sa.Column("error", sa.String(length=4000), nullable=True),
        sa.Column("model", sa.String(length=512), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("owner", sa.String(length=300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adapter_imports")),
    )
    with op.batch_alter_table("adapter_imports", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_adapter_imports_namespace"), ["namespace"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("adapter_imports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_adapter_imports_namespace"))
    op.drop_table("adapter_imports")
