"""goaai's URL configuration."""

from django.contrib import admin
from django.urls import include, path

from goaai.health import healthz, readyz
from runs_app.metrics import MetricsView
from sessions_app.views import token_create, token_revoke, user_settings, webhook_settings

admin.site.site_header = "goaai operations"
admin.site.site_title = "goaai"
admin.site.index_title = "Sessions, runs and memory"
admin.site.index_template = "admin/goaai_index.html"
# The console's lists need the page's width (a run a line at 1440 px, beside the
# filters): the models are listed on its home page, a click away in every page's
# breadcrumbs, rather than in a sidebar on every page.
admin.site.enable_nav_sidebar = False

urlpatterns = [
    # Probes and monitoring: no credentials (metrics: loopback or a bearer secret).
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("goaai.api_urls")),
    # OpenAI-compatible serving of the agents (its contract is OpenAI's, outside
    # the /api/v1/ schema).
    path("v1/", include("runs_app.openai_api.urls")),
    # Django's login and logout (logout by POST), password change and reset.
    path("accounts/", include("django.contrib.auth.urls")),
    path("settings/", user_settings, name="user-settings"),
    path("settings/tokens/", token_create, name="token-create"),
    path("settings/tokens/<uuid:token_id>/revoke/", token_revoke, name="token-revoke"),
    path("settings/webhooks/", webhook_settings, name="webhook-settings"),
    path("", include("runs_app.urls")),
]

# JSON errors in the API's shape for paths under /api/, Django's pages elsewhere.
handler404 = "goaai.api.errors.api_not_found"
handler500 = "goaai.api.errors.api_server_error"
