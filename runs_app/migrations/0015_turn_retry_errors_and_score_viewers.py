"""What the provider said of each failed model attempt, kept on the turn for
operators; and the Auditors and Operators groups read scores as they read runs."""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations, models

GROUPS = ("Auditors", "Operators")


def grant_view_score(apps, schema_editor):
    using = schema_editor.connection.alias
    app_config = apps.get_app_config("runs_app")
    # Permissions are created after every migration has run; on a new database the
    # one for scores does not exist yet (see 0007).
    app_config.models_module = True
    create_contenttypes(app_config, verbosity=0, using=using, apps=apps)
    create_permissions(app_config, verbosity=0, using=using, apps=apps)
    app_config.models_module = None
    permission = (
        apps.get_model("auth", "Permission")
        .objects.using(using)
        .get(content_type__app_label="runs_app", codename="view_score")
    )
    for group in apps.get_model("auth", "Group").objects.using(using).filter(name__in=GROUPS):
        group.permissions.add(permission)


def revoke_view_score(apps, schema_editor):
    using = schema_editor.connection.alias
    permission_model = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.using(using).filter(name__in=GROUPS):
        group.permissions.remove(
            *permission_model.objects.using(using).filter(
                content_type__app_label="runs_app", codename="view_score"
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("runs_app", "0014_partial_turns_stops_and_scores"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="retry_errors",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(grant_view_score, revoke_view_score),
    ]
