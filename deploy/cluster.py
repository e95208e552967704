"""Start goaai scaled out on one machine: nginx, N ASGI servers, M Celery workers.

    make cluster                      # 2 servers, 2 workers, on http://127.0.0.1:8080
    make cluster CLUSTER_SERVERS=3 CLUSTER_WORKERS=4

It uses the machine's PostgreSQL and Redis, in a database and a Redis database
number of the cluster's own (created when missing, never emptied), applies the
migrations, creates an administrator account the first time (its password is
printed once), collects the static files, renders nginx's configuration for the
servers into a folder of its own and hands over to honcho, which runs
deploy/Procfile and stops everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
MARKER = ".goaai-cluster"


def parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", type=int, default=int(env("CLUSTER_SERVERS", "2")))
    p.add_argument("--workers", type=int, default=int(env("CLUSTER_WORKERS", "2")))
    p.add_argument("--listen", default=env("CLUSTER_LISTEN", "127.0.0.1:8080"))
    p.add_argument("--port-base", type=int, default=int(env("CLUSTER_PORT_BASE", "8100")))
    p.add_argument(
        "--database",
        default=env("CLUSTER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/goaai_cluster"),
    )
    p.add_argument("--redis", default=env("CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/12"))
    p.add_argument(
        "--dir",
        type=Path,
        default=Path(env("CLUSTER_DIR", "/tmp/goaai-cluster")),  # noqa: S108
        help="the cluster's run folder (nginx prefix, metrics, static files)",
    )
    return p


def ensure_database(url: str) -> None:
    """Create the PostgreSQL database ``url`` names when it does not exist."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        return
    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists is None:
            print(f"Creating the database {name}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def fresh_dir(path: Path) -> None:
    """An empty run folder; an earlier cluster's is removed, nothing else ever is."""
    if path.exists():
        if not (path / MARKER).exists():
            raise SystemExit(f"{path} exists and is not a goaai cluster folder: choose another.")
        shutil.rmtree(path)
    for sub in ("nginx", "prometheus", "static"):
        (path / sub).mkdir(parents=True)
    (path / MARKER).touch()
    # nginx's workers run as an unprivileged user when the master is root: they
    # read the static files and their temp folders through these.
    for folder in (path, path / "nginx", path / "static"):
        folder.chmod(0o755)


def port_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]") or "127.0.0.1", int(port)))
        except OSError:
            return False
    return True


def check_ports(args: argparse.Namespace) -> None:
    wanted = [args.listen] + [f"127.0.0.1:{args.port_base + n}" for n in range(1, args.servers + 1)]
    busy = [address for address in wanted if not port_free(address)]
    if busy:
        raise SystemExit(f"These addresses are in use: {', '.join(busy)} (is a cluster running?)")


def environment(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": args.database,
            "REDIS_URL": args.redis,
            "GOAAI_EXECUTOR": "celery",
            "PROMETHEUS_MULTIPROC_DIR": str(args.dir / "prometheus"),
            "STATIC_ROOT": str(args.dir / "static"),
            "GOAAI_NGINX_PREFIX": str(args.dir / "nginx"),
            "GOAAI_WEB_PORT_BASE": str(args.port_base),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.setdefault("DEBUG", "0")
    return env


def manage(env: dict[str, str], *command: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), *command], env=env, check=True)  # noqa: S603


def render_nginx(args: argparse.Namespace, env: dict[str, str]) -> None:
    prefix = args.dir / "nginx"
    subprocess.run(  # noqa: S603
        [
            sys.executable,
            str(DEPLOY / "nginx.py"),
            "--standalone",
            f"--prefix={prefix}",
            f"--listen={args.listen}",
            f"--servers={args.servers}",
            f"--port-base={args.port_base}",
            f"--static-root={args.dir / 'static'}",
            f"--output={prefix / 'nginx.conf'}",
        ],
        env=env,
        check=True,
    )
    nginx = shutil.which("nginx") or "nginx"
    subprocess.run(  # noqa: S603
        [nginx, "-q", "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf")], check=True
    )


def main() -> None:
    args = parser().parse_args()
    honcho = Path(sys.executable).parent / "honcho"
    if shutil.which("nginx") is None:
        raise SystemExit("nginx is missing: `make nginx` installs Debian's (as root).")
    if not honcho.exists():
        raise SystemExit("honcho is missing: pip install -e '.[deploy]'.")
    check_ports(args)
    ensure_database(args.database)
    fresh_dir(args.dir)
    env = environment(args)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "ensure_admin", "--url", f"http://{args.listen}/")
    manage(env, "collectstatic", "--noinput", "-v", "0")
    render_nginx(args, env)
    print(
        f"goaai on http://{args.listen}/ : nginx -> {args.servers} daphne "
        f"(127.0.0.1:{args.port_base + 1}..{args.port_base + args.servers}), "
        f"{args.workers} Celery workers, {args.database}, {args.redis}. Ctrl-C stops it.",
        flush=True,
    )
    concurrency = f"nginx=1,web={args.servers},worker={args.workers}"
    os.chdir(ROOT)
    os.execve(  # noqa: S606
        honcho,
        [str(honcho), "start", "-f", str(DEPLOY / "Procfile"), "-d", str(ROOT), "-c", concurrency],
        env,
    )


if __name__ == "__main__":
    main()
