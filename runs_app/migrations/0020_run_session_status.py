"""An index on runs by session and status: a new message reads how many of its
session's runs are open and the newest of them, under the session's lock, through
it, instead of through every open run of every session or every run of the
session."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs_app", "0019_run_labels_index"),
        ("sessions_app", "0010_activity_preferences_interrupted_event"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["session", "status"], name="run_session_status"),
        ),
    ]
