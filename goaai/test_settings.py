"""Settings for the test suite: the real settings, made fast and self-contained."""

from goaai.settings import *  # noqa: F403

# Hashing a password properly takes ~0.3 s by design; tests log in constantly.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Static files are served from the apps; tests never run collectstatic.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
# Tests start reapers themselves when they want one.
GOAAI_REAPER_INTERVAL = 0
# Tests send due webhook deliveries themselves (sessions_app.webhooks.delivery).
GOAAI_WEBHOOK_POLL_SECONDS = 0
