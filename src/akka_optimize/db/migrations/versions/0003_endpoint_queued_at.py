"""endpoint queued_at: an endpoint's place in its pool's queue

Revision ID: 0003_endpoint_queued_at
Revises: 0002_project_evaluation
Create Date: 2026-12-02 01:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0003_endpoint_queued_at"
down_revision = "0002_project_evaluation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("endpoints", schema=None) as batch_op:
        batch_op.drop_column("queued_at")
