"""The event log belongs to sessions: its model moves to sessions_app (the table
is renamed there, its rows stay)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("runs_app", "0004_audit_filter_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="RunEvent")],
            database_operations=[],
        ),
    ]
