"""Render goaai's nginx configuration for N ASGI servers.

    python deploy/nginx.py --servers 4 > /etc/nginx/sites-enabled/goaai   # the system nginx
    python deploy/nginx.py --standalone --prefix /tmp/goaai-nginx --servers 2 \\
        --output /tmp/goaai-nginx/nginx.conf       # a master of its own (make cluster)

The body limits come from goaai's own settings (``GOAAI_MAX_BODY_BYTES`` and
``GOAAI_API_MAX_BODY_BYTES``, from the same environment the servers get), so that
nginx refuses exactly what goaai would, before any of it is stored.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.template import Context, Engine

TEMPLATE = Path(__file__).resolve().parent / "nginx.conf.template"
# Bodies of pages (forms, admin) up to this stay in memory; larger ones, up to the
# page limit and never past it, are buffered in the prefix's client_body_temp.
PAGE_BODY_BUFFER_BYTES = 1024 * 1024
# How much more than the API's body limit nginx holds in memory for an API request.
API_BODY_BUFFER_SLACK = 64 * 1024
# How much longer than goaai's wait for a run nginx waits for a /v1/ answer.
OPENAI_TIMEOUT_SLACK_SECONDS = 60


def upstreams(args: argparse.Namespace) -> list[str]:
    """The ASGI servers' addresses, as nginx's ``server`` lines name them."""
    if args.upstream:
        return list(args.upstream)
    if args.socket_dir:
        base = Path(args.socket_dir).resolve()
        return [f"unix:{base}/web.{n}.sock" for n in range(1, args.servers + 1)]
    return [f"{args.host}:{args.port_base + n}" for n in range(1, args.servers + 1)]


def body_limits() -> tuple[int, int]:
    """goaai's page and API body limits, as its settings state them."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")
    return int(settings.GOAAI_MAX_BODY_BYTES), int(settings.GOAAI_API_MAX_BODY_BYTES)


def run_wait_seconds() -> int:
    """How long goaai waits for a run before a ``/v1/`` request answers without it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")
    return int(settings.GOAAI_RUN_WAIT_SECONDS)


def context(args: argparse.Namespace) -> dict[str, Any]:
    max_body, api_max_body = body_limits()
    prefix = Path(args.prefix).resolve() if args.prefix else None
    if args.standalone and prefix is None:
        raise SystemExit("--standalone needs --prefix (the directory nginx runs in)")
    return {
        "standalone": args.standalone,
        "prefix": prefix,
        "nginx_workers": str(args.nginx_workers),
        "mime_types": args.mime_types,
        "access_log": args.access_log,
        "upstreams": upstreams(args),
        "listen": args.listen,
        "server_name": args.server_name,
        # Numbers as text: the template engine would localise them otherwise.
        "max_body_bytes": str(max_body),
        "api_max_body_bytes": str(api_max_body),
        "page_body_buffer": str(min(max_body, PAGE_BODY_BUFFER_BYTES)),
        # Room past the limit: a chunked body that crosses it is refused while it is
        # still in memory, rather than once a full buffer went to disk.
        "api_body_buffer": str(api_max_body + API_BODY_BUFFER_SLACK),
        # Past goaai's own wait for a run: a /v1/ request waiting for its run is
        # answered by goaai (its run named), never cut off by nginx.
        "openai_read_timeout": str(run_wait_seconds() + OPENAI_TIMEOUT_SLACK_SECONDS),
        "static_root": Path(args.static_root).resolve() if args.static_root else None,
        "metrics_allow": args.metrics_allow or ["127.0.0.1", "::1"],
    }


def render(args: argparse.Namespace) -> str:
    """The configuration ``args`` describe."""
    engine = Engine(autoescape=False)
    return engine.from_string(TEMPLATE.read_text()).render(Context(context(args)))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:8080", help="nginx's listen address")
    p.add_argument("--server-name", default="_", help="server_name (default: any)")
    p.add_argument("--servers", type=int, default=2, help="how many ASGI servers")
    p.add_argument("--host", default="127.0.0.1", help="the ASGI servers' host (TCP)")
    p.add_argument(
        "--port-base",
        type=int,
        default=int(os.environ.get("GOAAI_WEB_PORT_BASE", "8100")),
        help="server n listens on port-base + n (deploy/bin/goaai-web does the same)",
    )
    p.add_argument("--socket-dir", help="servers listen on DIR/web.<n>.sock instead")
    p.add_argument("--upstream", action="append", help="an explicit server address (repeatable)")
    p.add_argument("--static-root", help="serve /static/ from this collectstatic folder")
    p.add_argument("--metrics-allow", action="append", help="addresses allowed to read /metrics")
    p.add_argument("--standalone", action="store_true", help="a whole nginx.conf")
    p.add_argument("--prefix", help="standalone: nginx's prefix (pid, temp files)")
    p.add_argument("--nginx-workers", default="2", help="standalone: worker_processes")
    p.add_argument("--mime-types", default="/etc/nginx/mime.types", help="standalone")
    p.add_argument("--access-log", default="/dev/stdout", help="standalone: access_log")
    p.add_argument("--output", help="write here instead of standard output")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    text = render(args)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
