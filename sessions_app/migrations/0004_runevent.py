"""The event log belongs to sessions: its model moves here from runs_app. The rows
stay where they are; the table takes this app's name, and the content type (and
so every permission on it) follows the model."""

import django.db.models.deletion
from django.db import migrations, models


def move_content_type(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.using(schema_editor.connection.alias).filter(
        app_label="runs_app", model="runevent"
    ).update(app_label="sessions_app")


def restore_content_type(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.using(schema_editor.connection.alias).filter(
        app_label="sessions_app", model="runevent"
    ).update(app_label="runs_app")


class Migration(migrations.Migration):

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("sessions_app", "0003_api_token_name"),
        ("runs_app", "0005_move_runevent_to_sessions"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RunEvent",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("seq", models.BigIntegerField()),
                        (
                            "type",
                            models.CharField(
                                choices=[('session.created', 'Session.created'), ('session.updated', 'Session.updated'), ('session.ended', 'Session.ended'), ('run.created', 'Run.created'), ('run.started', 'Run.started'), ('turn.started', 'Turn.started'), ('turn.completed', 'Turn.completed'), ('message.completed', 'Message.completed'), ('tool_call.scheduled', 'Tool call.scheduled'), ('tool_call.started', 'Tool call.started'), ('tool_call.succeeded', 'Tool call.succeeded'), ('tool_call.failed', 'Tool call.failed'), ('tool_call.approval_requested', 'Tool call.approval requested'), ('tool_call.decided', 'Tool call.decided'), ('tool_call.canceled', 'Tool call.canceled'), ('run.awaiting_input', 'Run.awaiting input'), ('run.resumed', 'Run.resumed'), ('memory.stored', 'Memory.stored'), ('memory.deleted', 'Memory.deleted'), ('policy.decision', 'Policy.decision'), ('usage', 'Usage'), ('run.child_linked', 'Run.child linked'), ('run.completed', 'Run.completed'), ('run.failed', 'Run.failed'), ('run.canceled', 'Run.canceled'), ('run.timed_out', 'Run.timed out')],
                                max_length=40,
                            ),
                        ),
                        ("data", models.JSONField(blank=True, default=dict)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="events",
                                to="runs_app.run",
                            ),
                        ),
                        (
                            "session",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="events",
                                to="sessions_app.session",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_app_runevent",
                        "ordering": ["session", "seq"],
                        "indexes": [
                            models.Index(fields=["run", "seq"], name="event_run_seq"),
                            models.Index(fields=["type", "-created_at"], name="event_type_created"),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("session", "seq"), name="event_seq_unique_per_session"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("seq__gt", 0)), name="event_seq_positive"
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
        migrations.AlterModelTable(name="runevent", table=None),
    ]
