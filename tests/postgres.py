"""A throwaway PostgreSQL cluster for tests: initdb in a temp dir, started on a free loopback port.

Found under /usr/lib/postgresql/*/bin (Debian's packages; `.ci/run` installs them). initdb refuses to
run as root, so as root the cluster belongs to the ``postgres`` system user that Debian's package adds.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUPERUSER = "composer"


def postgres_bin() -> Path | None:
    """The newest installed server's bin directory, or None when PostgreSQL is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    """A running cluster; ``database(name)`` creates a database and returns its SQLAlchemy URL."""

    def __init__(self, port: int) -> None:
        self.port = port

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def database(self, name: str) -> str:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)


@contextmanager
def running_postgres(bin_dir: Path, max_connections: int = 60) -> Iterator[Postgres]:
    """Start a cluster in a new temp dir; stop it and delete the dir on exit."""
    as_root = os.geteuid() == 0
    home = Path(tempfile.mkdtemp(prefix="composer-pg-"))
    data, log = home / "data", home / "server.log"
    prefix: list[str] = []
    if as_root:
        shutil.chown(home, user="postgres")
        prefix = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "postgres", "--"]
    port = free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
            "--no-sync")
        options = (f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c max_connections={max_connections}")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60",
            "start")
        try:
            yield Postgres(port)
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    except subprocess.CalledProcessError as exc:
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"PostgreSQL failed: {exc.stderr!r} {detail}") from exc
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def caches_database(password: str | None = None) -> Iterator[str]:
    """A running cluster's ``caches`` database URL (holding ``password``, which trust auth ignores: a test
    then checks it never reaches a log or a file); the test skips, saying why, without Debian's binaries."""
    import pytest

    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not installed: apt-get install postgresql, as .ci/run does")
    with running_postgres(bin_dir) as pg:
        url = pg.database("caches")
        yield url if password is None else url.replace(f"{SUPERUSER}@", f"{SUPERUSER}:{password}@")


@contextmanager
def running_mlflow_server(root: Path, backend: str) -> Iterator[str]:
    """An MLflow tracking server on loopback over the PostgreSQL database ``backend``, as
    docker-compose.yml runs it, its log and artifacts under ``root``; its URL, stopped on exit."""
    import sys
    import time
    import urllib.request

    port = free_port()
    log_file = root / "mlflow-server.log"
    log = log_file.open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
         "--artifacts-destination", str(root / "mlartifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # No job runner (MLflow's scheduled scorers and prompt optimization, which a study does not use):
        # its two consumer processes each import MLflow, CPU the workers under test would wait behind.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        deadline = time.monotonic() + 120
        while not healthy():
            assert server.poll() is None, log_file.read_text()[-3000:]
            assert time.monotonic() < deadline, "MLflow server did not start"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()
