"""goaai's URL configuration."""

from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

admin.site.site_header = "goaai operations"
admin.site.site_title = "goaai"
admin.site.index_title = "Sessions, runs and memory"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
