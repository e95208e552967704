# Webhook endpoints, their deliveries and each delivery's attempts.

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0008_queued_and_summarized_events"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookEndpoint",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("url", models.URLField(max_length=2000)),
                ("description", models.CharField(blank=True, max_length=200)),
                ("events", models.JSONField(default=list)),
                ("secret", models.CharField(editable=False, max_length=100)),
                ("active", models.BooleanField(default=True)),
                ("disabled_reason", models.CharField(blank=True, max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "owner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="webhook_endpoints",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("event_type", models.CharField(max_length=40)),
                ("message_id", models.CharField(max_length=40, unique=True)),
                ("payload", models.JSONField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("failed", "Failed"),
                            ("succeeded", "Succeeded"),
                            ("gave_up", "Gave up"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_response_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("redelivery_requested", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "endpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="sessions_app.webhookendpoint",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "webhook deliveries",
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="WebhookAttempt",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("number", models.PositiveIntegerField()),
                ("started_at", models.DateTimeField()),
                ("response_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("latency_ms", models.PositiveIntegerField(default=0)),
                ("succeeded", models.BooleanField(default=False)),
                ("error", models.CharField(blank=True, max_length=500)),
                ("response_excerpt", models.TextField(blank=True)),
                ("manual", models.BooleanField(default=False)),
                (
                    "delivery",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempt_log",
                        to="sessions_app.webhookdelivery",
                    ),
                ),
            ],
            options={
                "ordering": ["delivery", "number"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("delivery", "number"), name="webhook_attempt_unique_number"
                    )
                ],
            },
        ),
        migrations.AddIndex(
            model_name="webhookendpoint",
            index=models.Index(fields=["owner", "active"], name="webhook_owner_active"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(
                fields=["endpoint", "-created_at"], name="webhook_delivery_endpoint"
            ),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["next_attempt_at"], name="webhook_delivery_due"),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["-created_at"], name="webhook_delivery_created"),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["pending", "failed", "succeeded", "gave_up"])),
                name="webhook_delivery_status_valid",
            ),
        ),
    ]
