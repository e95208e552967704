"""Latency histograms of every user's runs together, beside those of each user.

The per-user rows become ``UserLatencyRollup``; ``LatencyRollup`` now holds the
same histograms without the user, added up from them. The runs waiting for a
person get a partial index on the time they started waiting.
"""

from django.conf import settings
from django.db import migrations, models
from django.db.models import Sum

BATCH = 2000


def add_up_everyone(apps, schema_editor):
    alias = schema_editor.connection.alias
    by_user = apps.get_model("runs_app", "UserLatencyRollup").objects.using(alias)
    everyone = apps.get_model("runs_app", "LatencyRollup")
    keys = ("span", "period", "agent", "model", "measure", "bucket")
    rows = []
    for row in by_user.values(*keys).annotate(total=Sum("runs")).order_by().iterator(BATCH):
        total = row.pop("total")
        if total:
            rows.append(everyone(**row, runs=total))
        if len(rows) >= BATCH:
            everyone.objects.using(alias).bulk_create(rows)
            rows = []
    everyone.objects.using(alias).bulk_create(rows)


class Migration(migrations.Migration):
    dependencies = [
        ("runs_app", "0017_run_model_backfill"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="latencyrollup", name="latencyrollup_key"),
        migrations.RemoveIndex(model_name="latencyrollup", name="latencyrollup_span_period"),
        migrations.RenameModel(old_name="LatencyRollup", new_name="UserLatencyRollup"),
        migrations.AddConstraint(
            model_name="userlatencyrollup",
            constraint=models.UniqueConstraint(
                fields=("span", "period", "agent", "model", "owner", "measure", "bucket"),
                name="userlatencyrollup_key",
            ),
        ),
        migrations.AddIndex(
            model_name="userlatencyrollup",
            index=models.Index(fields=["owner", "span", "period"], name="userlatencyrollup_owner"),
        ),
        migrations.CreateModel(
            name="LatencyRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "span",
                    models.CharField(choices=[("hour", "Hour"), ("day", "Day")], max_length=4),
                ),
                ("period", models.DateTimeField()),
                ("agent", models.CharField(max_length=100)),
                ("model", models.CharField(blank=True, max_length=200)),
                (
                    "measure",
                    models.CharField(
                        choices=[
                            ("duration", "From start to end"),
                            ("working", "Working (waits for people left out)"),
                        ],
                        max_length=8,
                    ),
                ),
                ("bucket", models.PositiveSmallIntegerField()),
                ("runs", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("span", "period", "agent", "model", "measure", "bucket"),
                        name="latencyrollup_key",
                    )
                ],
            },
        ),
        migrations.RunPython(add_up_everyone, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(status="awaiting_input"),
                fields=["awaiting_since"],
                name="run_awaiting_since",
            ),
        ),
    ]
