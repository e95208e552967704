"""A GIN index on runs' labels (PostgreSQL), which the label filters of the admin,
the API and the dashboard use through JSON containment (``labels @> {"tier":
"free"}``): a label is then found through the index, however many runs there are,
instead of by reading every run. SQLite has no such index; it reads the runs."""

from typing import Any

from django.db import migrations

CREATE = "CREATE INDEX IF NOT EXISTS run_labels_gin ON runs_app_run USING gin (labels jsonb_path_ops)"
DROP = "DROP INDEX IF EXISTS run_labels_gin"


def create_index(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop_index(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs_app", "0018_latency_rollups_of_everyone")]

    operations = [migrations.RunPython(create_index, drop_index)]
