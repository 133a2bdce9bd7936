"""project evaluation settings

Revision ID: 0002_project_evaluation
Revises: 0001_initial
Create Date: 2026-12-01 18:10:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0002_project_evaluation"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("evaluation", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("evaluation")
