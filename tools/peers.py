"""The peers' benches (``../shared/peers/``), run by ``nodeflow_bench --peers``
in the same run as Node Flow's, with the Node Flow stack stopped: the
pgbench baseline (``baseline.sh``), Celery, Procrastinate (default settings,
then workload B again with 50 ms polling, as ``run_all.sh`` does), DBOS and,
with ``--peers-prefect``, Prefect. Each prints one JSON line
(``common.emit``: system, version, settings, results); this collects them.

Each peer runs with the venv ``setup_venvs.sh`` makes
(``$PEERS_VENVS/<peer>``, default ``/tmp/peers-venvs``); a peer whose venv
is missing is skipped with how to make it. Celery needs a Redis on
``BENCH_REDIS_URL`` (default 127.0.0.1:6379), which this neither starts nor
stops.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tools.stack import ROOT

DEFAULT_PEERS_DIR = ROOT.parent / "shared" / "peers"
DEFAULT_VENVS = "/tmp/peers-venvs"
PEER_TIMEOUT_S = 900  # as run_all.sh


@dataclass
class Peer:
    name: str  # the log's name
    venv: str | None  # None: not Python (baseline.sh)
    script: str
    env: dict[str, str] = field(default_factory=dict)


def peers(*, prefect: bool) -> list[Peer]:
    chosen = [
        Peer("pgbench", None, "baseline.sh"),
        Peer("celery", "celery", "bench_celery.py"),
        Peer("procrastinate", "procrastinate", "bench_procrastinate.py"),
        # Workload B again with a 50 ms polling fallback (README: lost wake-ups cost 5 s by default).
        Peer(
            "procrastinate_poll50ms",
            "procrastinate",
            "bench_procrastinate.py",
            {"BENCH_ONLY_B": "1", "BENCH_PROCRASTINATE_POLL_S": "0.05"},
        ),
        Peer("dbos", "dbos", "bench_dbos.py"),
    ]
    if prefect:
        home = Path(tempfile.gettempdir()) / "peers-prefect-home"
        env = {
            "PREFECT_HOME": str(home),
            "PREFECT_LOGGING_LEVEL": "WARNING",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        chosen.append(Peer("prefect", "prefect", "bench_prefect.py", env))
    return chosen


def parse_json_lines(text: str) -> dict | None:
    """The last line of a peer's output that is a JSON object (what
    ``common.emit`` prints; run_all.sh reads it the same way), or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if isinstance(answer, dict) and isinstance(answer.get("results"), list):
                return answer
    return None


def peer_env(admin_url: str, knobs: dict[str, str], log_dir: Path) -> dict[str, str]:
    """The peers' environment: the same knobs as Node Flow's run, the same
    PostgreSQL (host, port and user of ``admin_url``)."""
    parts = urlsplit(admin_url)
    host, port, user = parts.hostname or "127.0.0.1", str(parts.port or 5432), parts.username or "postgres"
    return {
        **os.environ,
        **knobs,
        "BENCH_PG_HOST": host,
        "BENCH_PG_PORT": port,
        "BENCH_PG_USER": user,
        "BENCH_PG_URL_BASE": f"postgresql://{user}@{host}:{port}",
        "BENCH_LOG_DIR": str(log_dir),
        "PYTHONUNBUFFERED": "1",
    }


def redis_reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1):
            return True
    except OSError:
        return False


def run_peers(
    *,
    admin_url: str,
    knobs: dict[str, str],
    out: Callable[[str], None],
    peers_dir: Path | None = None,
    venvs: str | None = None,
    prefect: bool = False,
) -> dict:
    """Run every peer one after another; ``{"peers": {name: emitted JSON},
    "skipped": {name: why}, "logDir": …}``."""
    peers_dir = Path(peers_dir or os.environ.get("PEERS_DIR") or DEFAULT_PEERS_DIR)
    venvs = venvs or os.environ.get("PEERS_VENVS") or DEFAULT_VENVS
    log_dir = Path(tempfile.mkdtemp(prefix="nodeflow-bench-peers-"))
    env = peer_env(admin_url, knobs, log_dir)
    found: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    if not (peers_dir / "common.py").exists():
        return {"peers": found, "skipped": {"all": f"no peer benches in {peers_dir} (set PEERS_DIR)"}, "logDir": ""}
    for peer in peers(prefect=prefect):
        why = _cannot_run(peer, venvs, env)
        if why:
            out(f"peers: skipping {peer.name}: {why}")
            skipped[peer.name] = why
            continue
        command = ["bash", peer.script] if peer.venv is None else [f"{venvs}/{peer.venv}/bin/python", peer.script]
        if peer.name == "prefect":
            shutil.rmtree(peer.env["PREFECT_HOME"], ignore_errors=True)
        out(f"peers: running {peer.name} …")
        stdout_path, stderr_path = log_dir / f"{peer.name}.json", log_dir / f"{peer.name}.log"
        with open(stdout_path, "w") as stdout, open(stderr_path, "w") as stderr:
            try:
                done = subprocess.run(
                    command,
                    cwd=peers_dir,
                    env={**env, **peer.env},
                    stdout=stdout,
                    stderr=stderr,
                    timeout=PEER_TIMEOUT_S,
                    check=False,
                )
                code: int | str = done.returncode
            except subprocess.TimeoutExpired:
                code = f"timed out after {PEER_TIMEOUT_S} s"
        emitted = parse_json_lines(stdout_path.read_text())
        if code != 0 or emitted is None:
            why = f"failed ({code}); see {stderr_path}"
            out(f"peers: {peer.name} {why}")
            skipped[peer.name] = why
            continue
        found[peer.name] = emitted
        for row in emitted["results"]:
            out(f"   {row['workload']:<22} {row['metric']:<28} {row['value']:>10} {row['unit']}")
    return {"peers": found, "skipped": skipped, "logDir": str(log_dir)}


def _cannot_run(peer: Peer, venvs: str, env: dict[str, str]) -> str:
    if peer.venv is None:
        missing = [tool for tool in ("pgbench", "psql") if shutil.which(tool) is None]
        return f"{', '.join(missing)} not found" if missing else ""
    python = Path(venvs) / peer.venv / "bin" / "python"
    if not python.exists():
        return (
            f"no venv at {python.parent.parent}: create the peers' venvs with "
            f"PEERS_VENVS={venvs} ../shared/peers/setup_venvs.sh (or point PEERS_VENVS at where they are)"
        )
    if peer.venv == "celery":
        redis_url = env.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
        if not redis_reachable(redis_url):
            return f"no Redis on {redis_url} (start one: redis-server --save '' --appendonly no)"
    return ""
