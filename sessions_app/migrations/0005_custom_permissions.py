from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0004_runevent"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="session",
            options={
                "ordering": ["-created_at"],
                "permissions": [("end_session", "Can end any user's session")],
            },
        ),
    ]
