"""Each run's model: the model of its latest turn that has one."""

from django.db import migrations
from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Coalesce


def backfill(apps, schema_editor):
    run_model = apps.get_model("runs_app", "Run")
    turn_model = apps.get_model("runs_app", "Turn")
    latest = (
        turn_model.objects.filter(run_id=OuterRef("pk"))
        .exclude(model="")
        .order_by("-index")
        .values("model")[:1]
    )
    # A run without a turn keeps none.
    run_model.objects.filter(model="").update(model=Coalesce(Subquery(latest), Value("")))


class Migration(migrations.Migration):
    dependencies = [("runs_app", "0016_run_model_and_rollups")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
