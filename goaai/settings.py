"""Django settings for goaai.

Every value that differs between machines comes from the environment through
``goaai.env``. With nothing set, goaai runs embedded: a SQLite file in the project
folder, the in-memory channel layer, the in-process executor and the offline
scripted model. ``GOAAI_PRODUCTION=1`` turns on the checks a public deployment needs.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from goaai.env import (
    env_bool,
    env_database,
    env_int,
    env_json,
    env_list,
    env_origin,
    env_otlp_endpoint,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent

PRODUCTION = env_bool("GOAAI_PRODUCTION", default=False)
DEBUG = env_bool("DEBUG", default=not PRODUCTION)

# A development key is only ever used outside production; production refuses to
# start without a real one rather than sign cookies with a published value.
_DEV_SECRET_KEY = "goaai-insecure-development-key-do-not-use-in-production"  # noqa: S105
SECRET_KEY = env_str("SECRET_KEY") or _DEV_SECRET_KEY

if PRODUCTION:
    if DEBUG:
        raise ImproperlyConfigured("GOAAI_PRODUCTION is set: DEBUG must be off.")
    if SECRET_KEY == _DEV_SECRET_KEY:
        raise ImproperlyConfigured("GOAAI_PRODUCTION is set: SECRET_KEY must be set.")
    if len(SECRET_KEY) < 32:
        raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters long.")

# The address people reach goaai at (https://goaai.example.com), when it differs
# from what the server itself sees behind a proxy: the host it serves and the
# origin browsers post forms from.
GOAAI_PUBLIC_URL = env_origin("GOAAI_PUBLIC_URL")
_PUBLIC_HOST = urlsplit(GOAAI_PUBLIC_URL).hostname if GOAAI_PUBLIC_URL else None
ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS",
    default=[_PUBLIC_HOST]
    if _PUBLIC_HOST
    else ([] if PRODUCTION else ["127.0.0.1", "localhost", "[::1]"]),
)
CSRF_TRUSTED_ORIGINS = env_list(
    "CSRF_TRUSTED_ORIGINS", default=[GOAAI_PUBLIC_URL] if GOAAI_PUBLIC_URL else []
)
# Behind a proxy that ends TLS (nginx, a load balancer), the proxy says in a header
# that the client's request was https: Django then builds https URLs, marks the
# request secure (for CSRF's origin check and HSTS) and does not redirect it again.
# The default header is X-Forwarded-Proto: https; GOAAI_PROXY_SSL_HEADER names
# another ("X-Forwarded-Protocol=https"). Only set this behind such a proxy, which
# must overwrite the header: a client could send it too.
GOAAI_BEHIND_TLS_PROXY = env_bool("GOAAI_BEHIND_TLS_PROXY", default=False)
_PROXY_SSL_HEADER = env_str("GOAAI_PROXY_SSL_HEADER", "X-Forwarded-Proto=https")
if GOAAI_BEHIND_TLS_PROXY:
    _header, _, _value = _PROXY_SSL_HEADER.partition("=")
    if not _header.strip() or not _value.strip():
        raise ImproperlyConfigured(
            f"GOAAI_PROXY_SSL_HEADER must be Header-Name=value, not {_PROXY_SSL_HEADER!r}"
        )
    SECURE_PROXY_SSL_HEADER = (
        "HTTP_" + _header.strip().upper().replace("-", "_"),
        _value.strip(),
    )

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "drf_standardized_errors",
    "channels",
    # Failed sign-ins, counted per account and per address (goaai.security).
    "axes",
    "csp",
    "sessions_app",
    "runs_app",
    "memory_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Pages in the user's time zone: their preference, else their browser's.
    "sessions_app.timezones.TimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns a sign-in refused for a lockout into its answer (goaai.security).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "goaai.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "sessions_app.context_processors.preferences",
            ],
        },
    },
]

WSGI_APPLICATION = "goaai.wsgi.application"
ASGI_APPLICATION = "goaai.asgi.application"

DATABASES = {
    "default": env_database("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'goaai.sqlite3'}"),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# One clock everywhere: times of day in 24 hours (HH:MM), the admin's included
# (goaai/formats/en/formats.py overrides the English locale's 12-hour "P").
FORMAT_MODULE_PATH = ["goaai.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env_str("STATIC_ROOT") or (str(BASE_DIR / "staticfiles") if PRODUCTION else None)
# WhiteNoise serves static files straight from the apps, so every page works
# without a build step; in production, once `collectstatic` has run, it serves the
# collected, compressed files under content-hashed names (goaai.static).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "goaai.static.CollectedOrAppStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/accounts/login/"
# Password guessing (django-axes): after GOAAI_LOGIN_FAILURE_LIMIT failed sign-ins
# an account, and separately an address, is refused for GOAAI_LOGIN_COOLOFF_MINUTES,
# on the login page, the admin and HTTP Basic alike. Failures are counted in the
# database, so every server process counts together.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("GOAAI_LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env_int("GOAAI_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
# Guessing on during a lockout does not prolong it, and signing in clears the count.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_CLIENT_IP_CALLABLE = "goaai.security.client_address"
AXES_LOCKOUT_CALLABLE = "goaai.security.lockout_response"
# Failures are logged at WARNING by the handler; the rest of its chatter is noise.
AXES_VERBOSE = False
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Live updates and the distributed executor: Redis when REDIS_URL is set, otherwise
# everything stays inside the one server process.
REDIS_URL = env_str("REDIS_URL")
# A subscriber's queue in the in-memory layer holds this many messages; past it the
# layer drops messages for that subscriber, which then reads them from the database.
GOAAI_CHANNEL_CAPACITY = env_int("GOAAI_CHANNEL_CAPACITY", 1000)
if REDIS_URL:
    # Redis pub/sub: measured faster than channels_redis' list-based layer at 1 to
    # 100 subscribers and without its per-channel drops (bench/live_delivery.py).
    # Either may lose a message on a reconnect; sequence numbers and the database
    # catch-up keep every stream complete. goaai's subclass lets committing threads
    # publish without a hop to an event loop, and decodes a group's message once
    # for a server's subscribers (goaai.channel_layers).
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goaai.channel_layers.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goaai.channel_layers.InMemoryChannelLayer",
            # Subscriptions last as long as their sockets: the layer's default drops
            # a group membership after a day, silencing a chat left open that long.
            "CONFIG": {"capacity": GOAAI_CHANNEL_CAPACITY, "group_expiry": 10**9},
        }
    }

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker keeps its database connections across tasks (for this many tasks)
# instead of closing them, and its connection pool, after every one: a run is one
# task, and a new connection for each cost two transactions and every prepared
# statement.
CELERY_DB_REUSE_MAX = env_int("GOAAI_CELERY_DB_REUSE_MAX", 200)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Redis may go away and come back (a restart, a failover). A worker keeps executing
# the runs it holds (their records go to the database, not to Redis), reconnects
# however long that takes, and then takes runs again; its consumer is goaai's
# own, which survives the loss with unacknowledged tasks (goaai.celery.Consumer).
CELERY_WORKER_CONSUMER = "goaai.celery:Consumer"
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A Redis that stops answering without closing its connections (a partition, a
# host that died) is an error after these many seconds, not a wait without end,
# for a server starting a run as for a worker tearing the lost connection down.
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 3, "socket_timeout": 10}

# The agent runtime.
# The executor runs a run's turn loop once the run is committed: "thread" (a pool
# of worker threads in this process), "inline" (in the caller's thread, for scripts
# and tests) or "celery" (a Celery worker on Redis; the default when REDIS_URL is set).
GOAAI_EXECUTOR = env_str("GOAAI_EXECUTOR", "celery" if REDIS_URL else "thread")
# Threads of the in-process executor: each holds one run, mostly waiting on its
# model's answer over the network, so there are many more than cores.
GOAAI_EXECUTOR_THREADS = env_int("GOAAI_EXECUTOR_THREADS", 64)
# A run on those threads keeps its database connection until it ends, model waits
# included: unless DATABASE_POOL_MAX says otherwise, PostgreSQL's pool holds one per
# thread and some for the requests (with 10, only 10 runs went at once, and a page
# waited 10 s for a connection: bench/capacity.py).
_POOL = DATABASES["default"].get("OPTIONS", {}).get("pool")
if GOAAI_EXECUTOR == "thread" and isinstance(_POOL, dict) and not env_str("DATABASE_POOL_MAX"):
    _POOL["max_size"] = GOAAI_EXECUTOR_THREADS + 16
# Requests that start a run let into Django at a time, per server process
# (goaai.start_gate; 0: no limit): the others wait in the event loop, and reads are
# served beside them. SQLite writes one transaction at a time whatever comes in: 1.
# PostgreSQL writes in parallel, and a run start there waits on its statements' round
# trips and its commit: 2, one's waits overlapping the other's work (bench/capacity.py:
# 50 chats 1.44x one chat, 1.58x with 1). A server whose runs Celery's workers execute
# only records and queues them: no limit, since holding starts back left it idle
# during their round trips (bench/api_throughput.py: run starts 0.73-0.79x the bare
# view with 2, 0.77-0.88x with none).
_ONE_WRITER = DATABASES["default"]["ENGINE"] == "goaai.sqlite"
GOAAI_RUN_STARTS_AT_ONCE = env_int(
    "GOAAI_RUN_STARTS_AT_ONCE", 1 if _ONE_WRITER else 0 if GOAAI_EXECUTOR == "celery" else 2
)
# Extra agents, as dotted paths to goaai.runtime.agents.Agent objects.
GOAAI_AGENTS: list[str] = env_list("GOAAI_AGENTS")
# How long rt.run() waits for a run to end before giving up waiting (the run goes on).
GOAAI_RUN_WAIT_SECONDS = env_int("GOAAI_RUN_WAIT_SECONDS", 300)
# A run waiting for an OpenAI-compatible client's own tools is canceled once it has
# waited this long (the client's next request to /v1/ notices), as OpenAI expires a
# response's requires_action after ten minutes.
GOAAI_CLIENT_TOOL_WAIT_SECONDS = env_int("GOAAI_CLIENT_TOOL_WAIT_SECONDS", 600)
# A worker holds a lease on the run it executes and renews it every third of this;
# a run whose lease expired lost its worker and is taken up by another.
GOAAI_RUN_LEASE_SECONDS = env_int("GOAAI_RUN_LEASE_SECONDS", 60)
# How often each server or worker process looks for such runs (0: never).
GOAAI_REAPER_INTERVAL = env_int("GOAAI_REAPER_INTERVAL", 15)
# Model profiles: named connections to model providers; an agent's model is
# "<profile>:<model>". The built-in profiles "openai" (OPENAI_API_KEY, and
# OPENAI_BASE_URL for Ollama, vLLM or llama.cpp) and "anthropic" (ANTHROPIC_API_KEY,
# ANTHROPIC_BASE_URL) are always there; GOAAI_MODEL_PROFILES (a JSON object) adds
# more or replaces them, e.g. {"local": {"kind": "openai", "base_url":
# "http://127.0.0.1:11434/v1", "api_key_env": "OLLAMA_API_KEY"}}. A key is needed
# only by agents using that profile (the scripted model needs none).
GOAAI_MODEL_PROFILES: dict[str, Any] = env_json("GOAAI_MODEL_PROFILES", {})
# MCP servers whose tools agents may use (toolset "mcp:<name>"), in the JSON shape
# MCP clients share: {"time": {"command": "python", "args": ["-m", "mcp_server_time"]}}
# for a server goaai starts, {"docs": {"url": "https://host/mcp", "headers": {}}} for
# one reached over streamable HTTP; "trusted": true lets its tools run without a
# person's approval, "timeout_seconds" bounds each call (30 by default).
GOAAI_MCP_SERVERS: dict[str, Any] = env_json("GOAAI_MCP_SERVERS", {})
# Memory ranked by meaning as well as by its words: an embedding model of one of those
# profiles ("<profile>:<model>", a profile of kind openai), e.g. "local:nomic-embed-text".
# Unset: full-text ranking alone.
GOAAI_MEMORY_EMBEDDINGS = env_str("GOAAI_MEMORY_EMBEDDINGS")
# Label rules tighten the policy of runs carrying the labels in "match"
# (goaai.runtime.policy.LabelRule). A JSON list in GOAAI_LABEL_RULES replaces these.
GOAAI_LABEL_RULES = env_json(
    "GOAAI_LABEL_RULES",
    [
        {
            "name": "free_tier",
            "match": {"tier": "free"},
            "max_tool_calls": 3,
            "blocked_toolsets": ["http"],
        },
        {"name": "review_required", "match": {"review": "required"}, "approval_required": ["*"]},
    ],
)
# Monitoring (runs_app.metrics): /metrics answers clients on the loopback interface,
# or, when this is set, only requests with "Authorization: Bearer <this secret>".
GOAAI_METRICS_TOKEN = env_str("GOAAI_METRICS_TOKEN")
# OpenTelemetry (runs_app.telemetry): GenAI traces and metrics of every run, exported
# over OTLP/HTTP only when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or the
# traces/metrics-specific variable) is set. The exporters read the other standard
# variables themselves (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
# OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*, OTEL_METRIC_EXPORT_INTERVAL).
GOAAI_OTEL_TRACES_ENDPOINT = env_otlp_endpoint("traces")
GOAAI_OTEL_METRICS_ENDPOINT = env_otlp_endpoint("metrics")
# Prompts, replies, tool arguments and results go on the spans only when asked
# (the GenAI conventions' opt-in): they are the users' data.
GOAAI_OTEL_CAPTURE_CONTENT = env_bool(
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", default=False
)

# Webhooks (sessions_app.webhooks). A URL whose host resolves to a private, loopback,
# link-local or otherwise non-public address is refused, unless it is within one of
# these networks (CIDRs, "10.0.0.0/8") or is one of these host names.
GOAAI_WEBHOOK_ALLOWED_NETWORKS: list[str] = env_list("GOAAI_WEBHOOK_ALLOWED_NETWORKS")
# How long one attempt may take, from connecting to reading the answer.
GOAAI_WEBHOOK_TIMEOUT_SECONDS = env_int("GOAAI_WEBHOOK_TIMEOUT_SECONDS", 10)
# How often each server and worker looks for deliveries that are due (a delivery
# made in the same process goes out at once), and how many it sends at a time.
GOAAI_WEBHOOK_POLL_SECONDS = env_int("GOAAI_WEBHOOK_POLL_SECONDS", 5)
GOAAI_WEBHOOK_SENDERS = env_int("GOAAI_WEBHOOK_SENDERS", 4)
# How many of them one endpoint may have at once: a slow receiver delays its own
# deliveries, not everyone's.
GOAAI_WEBHOOK_SENDERS_PER_ENDPOINT = env_int("GOAAI_WEBHOOK_SENDERS_PER_ENDPOINT", 1)

# The REST API (goaai.api): session login for the browser, API tokens for integrations.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "sessions_app.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["goaai.api.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "goaai.api.schema.GoaaiAutoSchema",
    "EXCEPTION_HANDLER": "drf_standardized_errors.handler.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
DRF_STANDARDIZED_ERRORS = {
    "EXCEPTION_HANDLER_CLASS": "goaai.api.errors.GoaaiExceptionHandler",
    # Unexpected errors answer in the API's JSON shape even with DEBUG on.
    "ENABLE_IN_DEBUG_FOR_UNHANDLED_EXCEPTIONS": True,
}
_ERROR_ENUMS = "drf_standardized_errors.openapi_serializers"
SPECTACULAR_SETTINGS = {
    "TITLE": "goaai API",
    "DESCRIPTION": (
        "Sessions, runs, turns, tool calls, events and memory of goaai's agents. "
        "Authenticate with the browser session (with CSRF) or `Authorization: Bearer "
        "<token>` (create tokens at /api/v1/auth/tokens/). Lists are cursor-paged; "
        "every error has the same JSON shape."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # PATCH bodies say which fields they need (a memory PATCH needs value and version).
    "COMPONENT_SPLIT_PATCH": False,
    "ENUM_NAME_OVERRIDES": {
        "MemoryScopeEnum": "goaai.runtime.vocabulary.MEMORY_SCOPE_CHOICES",
        "RunStatusEnum": "goaai.runtime.vocabulary.RUN_STATUS_CHOICES",
        "ToolCallStatusEnum": "goaai.runtime.vocabulary.TOOL_CALL_STATUS_CHOICES",
        "ScoreKindEnum": "goaai.runtime.vocabulary.SCORE_KIND_CHOICES",
        "ScoreSourceEnum": "goaai.runtime.vocabulary.SCORE_SOURCE_CHOICES",
        "SessionStatusEnum": "sessions_app.models.SessionStatus",
        "ValidationErrorEnum": f"{_ERROR_ENUMS}.ValidationErrorEnum.choices",
        "ClientErrorEnum": f"{_ERROR_ENUMS}.ClientErrorEnum.choices",
        "ServerErrorEnum": f"{_ERROR_ENUMS}.ServerErrorEnum.choices",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_standardized_errors.openapi_hooks.postprocess_schema_enums",
    ],
    "SECURITY": [{"bearerAuth": []}, {"cookieAuth": []}],
}
# The largest request body the API reads (a run's input is at most 32,000 characters).
GOAAI_API_MAX_BODY_BYTES = env_int("GOAAI_API_MAX_BODY_BYTES", 256 * 1024)
# The largest request body the ASGI server reads for any other page (forms, admin).
GOAAI_MAX_BODY_BYTES = env_int("GOAAI_MAX_BODY_BYTES", 10 * 1024 * 1024)
# Starting runs costs model tokens: limits per user (all credentials) and per token.
GOAAI_THROTTLE_RATES = {
    "run_create_user": env_str("GOAAI_RUN_RATE_PER_USER", "120/min"),
    "run_create_token": env_str("GOAAI_RUN_RATE_PER_TOKEN", "60/min"),
}
# Throttle counters live in the cache: Redis when there is one, so that every server
# process counts together; otherwise this process's memory.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # A Redis that stopped answering is an error (a 503 for starting a run)
            # after these many seconds, not a request that waits without end. Every
            # thread's cache takes its connections from one pool (goaai.redis_pool).
            "OPTIONS": {
                "socket_connect_timeout": 3,
                "socket_timeout": 3,
                "pool_class": "goaai.redis_pool.SharedConnectionPool",
            },
        }
    }

if PRODUCTION:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    # Browsers keep to https for this long once they have seen goaai over it.
    SECURE_HSTS_SECONDS = env_int("GOAAI_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("GOAAI_HSTS_INCLUDE_SUBDOMAINS", default=True)
    # A promise to the browsers' built-in lists that is slow to take back: opt in.
    SECURE_HSTS_PRELOAD = env_bool("GOAAI_HSTS_PRELOAD", default=False)
    SECURE_SSL_REDIRECT = env_bool("GOAAI_SSL_REDIRECT", default=True)
    # Probes and scrapes from inside the network speak plain http.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# Content-Security-Policy (django-csp) on every response: scripts and styles come
# from goaai's own static files; the few inline ones (Django's admin, the API docs
# page) carry the request's nonce. Live updates connect back to the same origin.
_LIVE_ORIGINS = (
    [GOAAI_PUBLIC_URL.replace("https://", "wss://").replace("http://", "ws://")]
    if GOAAI_PUBLIC_URL
    else []
)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF, *_LIVE_ORIGINS],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
