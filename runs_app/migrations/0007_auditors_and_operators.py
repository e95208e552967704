"""The two groups an operator account is put in (see goaai.access).

Auditors read every user's sessions, runs, turns, tool calls, events, memory and its
revisions, and the list of API tokens (names, prefixes, dates: never a secret, which
is not stored). Operators read the same and may cancel runs, answer what a waiting
run asks (approve, deny, answer) and end sessions; neither may edit or delete, nor
start runs or write memory in another user's name.

Permissions are created after every migration has run; on a new database they do
not exist yet when this one runs, so it creates those it needs first.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

AUDITORS = "Auditors"
OPERATORS = "Operators"

VIEW = [
    ("sessions_app", "view_session"),
    ("sessions_app", "view_runevent"),
    ("sessions_app", "view_apitoken"),
    ("runs_app", "view_run"),
    ("runs_app", "view_turn"),
    ("runs_app", "view_toolcall"),
    ("memory_app", "view_memoryentry"),
    ("memory_app", "view_memoryrevision"),
]
ACT = [
    ("runs_app", "cancel_run"),
    ("runs_app", "respond_run"),
    ("sessions_app", "end_session"),
]
GROUPS = {AUDITORS: VIEW, OPERATORS: VIEW + ACT}


def _ensure_permissions(apps, using):
    for label in ("sessions_app", "runs_app", "memory_app"):
        app_config = apps.get_app_config(label)
        # The historical app registry has no models module; these helpers skip an
        # app without one.
        app_config.models_module = True
        create_contenttypes(app_config, verbosity=0, using=using, apps=apps)
        create_permissions(app_config, verbosity=0, using=using, apps=apps)
        app_config.models_module = None


def create_groups(apps, schema_editor):
    using = schema_editor.connection.alias
    _ensure_permissions(apps, using)
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    for name, wanted in GROUPS.items():
        group, _ = group_model.objects.using(using).get_or_create(name=name)
        for app_label, codename in wanted:
            found = permission_model.objects.using(using).get(
                content_type__app_label=app_label, codename=codename
            )
            group.permissions.add(found)


def remove_groups(apps, schema_editor):
    group_model = apps.get_model("auth", "Group")
    using = schema_editor.connection.alias
    group_model.objects.using(using).filter(name__in=list(GROUPS)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("sessions_app", "0005_custom_permissions"),
        ("memory_app", "0001_initial"),
        ("runs_app", "0006_custom_permissions"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
