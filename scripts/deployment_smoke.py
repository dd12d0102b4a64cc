"""The deployment path, run as the image and docker-compose run it (CI runs it after ``make test``).

1. The files the Dockerfile's build stage COPYs (read from the Dockerfile, ``.dockerignore``
   honoured) are copied into a temporary folder, and its ``RUN`` lines run there as written, the
   image's ``/opt/venv`` being a fresh folder: ``scripts/install VENV plot,postgres,client``.
2. A fresh Postgres database on 127.0.0.1:5432 (trust auth; ``--postgres`` to change; dropped at
   the end). ``migrate``, ``serve`` and ``worker`` run with the commands and environment variables
   of docker-compose.yml over the runtime stage's ``ENV`` (host ``postgres`` -> the local server,
   the API on a free port of 127.0.0.1), from an empty working folder so only the installed
   packages can be imported; an admin key is made with ``keys create`` as docs/operations.md says. Added
   for the run: the scheduler at ``CALIBRATION_SCHEDULE_SECONDS=1`` and a local webhook receiver.
3. Through the installed ``calibration_client`` (and plain HTTP where the client has no call): fit
   -> alias (gated) -> calibrate with logging and ids -> labels -> a scheduled ``alarms`` job
   succeeds -> its alarm is POSTed to the receiver -> the refit policy's job -> an evaluation ->
   the promotion. A job that ends ``failed`` fails the run; so does a job left running.

Each step prints its time. ``--keep`` leaves the temporary folder; ``--venv PATH`` skips step 1
and uses an installed environment (for working on this script).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
IMAGE_VENV = "/opt/venv"  # where the build stage installs; the runtime stage copies it
NAME = "smoke"
DEADLINE_SECONDS = 90  # the longest wait for one asynchronous step (a job, a delivery)


# -- the Dockerfile and .dockerignore, read as Docker reads them (the subset this project uses) ----

def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    joined, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        joined.append(current + line)
        current = ""
    instructions = []
    for line in joined:
        word, _, rest = line.strip().partition(" ")
        instructions.append((word.upper(), rest.strip()))
    return instructions


def stages(text: str) -> list[dict]:
    """Each ``FROM`` stage: its base, name, WORKDIR, COPY lines (flags, sources, destination),
    RUN lines and ENV values."""
    found: list[dict] = []
    for word, rest in _instructions(text):
        if word == "FROM":
            parts = rest.split()
            found.append({"base": parts[0], "name": parts[2] if len(parts) > 2 else None, "workdir": "/",
                          "copies": [], "runs": [], "env": {}})
        elif word == "WORKDIR":
            found[-1]["workdir"] = rest
        elif word == "COPY":
            words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            found[-1]["copies"].append((flags, paths[:-1], paths[-1]))
        elif word == "RUN":
            found[-1]["runs"].append(rest)
        elif word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                found[-1]["env"][key] = value
    return found


def ignore_patterns(repo: Path) -> list[str]:
    path = repo / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` leaves the context path out (a pattern matches it or a parent;
    ``**/`` matches any depth)."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            return True
    return False


def build_files(repo: Path = REPO) -> dict[str, Path]:
    """The files the build stage (the first) COPYs from the context: path in the image relative to
    its WORKDIR (absolute when outside it) -> the file in ``repo``."""
    stage = stages((repo / "Dockerfile").read_text())[0]
    workdir, patterns = stage["workdir"].rstrip("/"), ignore_patterns(repo)
    placed: dict[str, Path] = {}
    for flags, sources, destination in stage["copies"]:
        if any(flag.startswith("--from") for flag in flags):
            continue
        into_folder = len(sources) > 1 or destination.endswith("/")
        target = destination if destination.startswith("/") else f"{workdir}/{destination}"
        target = os.path.normpath(target)
        for source in sources:
            origin = repo / source
            if origin.is_dir():
                for file in sorted(p for p in origin.rglob("*") if p.is_file()):
                    relative = file.relative_to(repo).as_posix()
                    if not ignored(relative, patterns):
                        placed[f"{target}/{file.relative_to(origin).as_posix()}"] = file
            elif origin.is_file() and not ignored(source, patterns):
                placed[f"{target}/{origin.name}" if into_folder else target] = origin
    return {(path[len(workdir) + 1:] if path.startswith(workdir + "/") else path): file
            for path, file in placed.items()}


def build_needs(repo: Path = REPO) -> set[str]:
    """What ``pip install .`` of the build stage reads: pyproject.toml, the readme, every module
    of each listed package (through package-dir), the package data, the modules of the console
    scripts, and the files the RUN lines execute."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())
    tool = project["tool"]["setuptools"]
    package_dirs = tool.get("package-dir", {})

    def folder(package: str) -> str:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in package_dirs:
                return "/".join([package_dirs[prefix], *parts[cut:]])
        return "/".join(parts)

    needs = {"pyproject.toml", project["project"]["readme"]}
    for package in tool["packages"]:
        needs |= {p.relative_to(repo).as_posix() for p in (repo / folder(package)).glob("*.py")}
        needs.add(f"{folder(package)}/__init__.py")
    for package, patterns in tool.get("package-data", {}).items():
        for pattern in patterns:
            needs |= {p.relative_to(repo).as_posix() for p in (repo / folder(package)).glob(pattern)}
    for target in project["project"].get("scripts", {}).values():
        module = target.partition(":")[0].split(".")
        needs.add(f"{folder('.'.join(module[:-1]))}/{module[-1]}.py")
    for run in stages((repo / "Dockerfile").read_text())[0]["runs"]:
        first = shlex.split(run)[0]
        if not first.startswith("/") and (repo / first).is_file():
            needs.add(first)
    return needs


# -- the compose file (only the parts this run needs; no YAML parser in the standard library) ----

def compose_services(repo: Path = REPO) -> dict[str, dict]:
    """``{service: {"command": [...], "environment": {...}}}`` of docker-compose.yml (a reader of
    its block mappings and flow-style commands; tests/test_deployment.py checks it against PyYAML)."""
    text = (repo / "docker-compose.yml").read_text()
    services: dict[str, dict] = {}
    service = section = None
    for line in text.splitlines():
        stripped = line.split(" #")[0].rstrip()
        if not stripped.strip() or stripped.lstrip().startswith("#"):
            continue
        indent = len(stripped) - len(stripped.lstrip())
        key, _, value = stripped.strip().partition(":")
        if indent == 0:
            section, service = key, None
        elif section == "services" and indent == 2:
            service = services.setdefault(key, {"command": None, "environment": {}})
            current = None
        elif service is not None and indent == 4:
            current = key
            if key == "command":
                service["command"] = json.loads(value.strip())
        elif service is not None and indent == 6 and current == "environment":
            service["environment"][key.strip()] = value.strip().strip('"')
    return services


def interpolate(value: str, environ: dict) -> str:
    """``${NAME}`` and ``${NAME:-default}`` in a compose value, from ``environ``, as docker-compose
    fills them in (unset or empty: the default, or the empty string)."""
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: environ.get(m.group(1)) or (m.group(2) or ""), value)


# -- the run ---------------------------------------------------------------------------------------

class Steps:
    def __init__(self, start: float | None = None) -> None:
        self.start, self.last = start or time.monotonic(), time.monotonic()

    def done(self, what: str) -> None:
        now = time.monotonic()
        print(f"smoke: {what:<58} {now - self.last:6.1f} s  (total {now - self.start:6.1f} s)", flush=True)
        self.last = now


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def install(folder: Path, steps: Steps) -> Path:
    """The build stage in ``folder``: its files copied, its RUN lines run; the venv's path."""
    source, venv = folder / "src", folder / "venv"
    for relative, file in build_files().items():
        if relative.startswith("/"):
            raise SystemExit(f"the build stage copies {relative} outside its WORKDIR; this run cannot place it")
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, source / relative)
    steps.done(f"copied the build stage's {len(build_files())} files")
    for run in stages((REPO / "Dockerfile").read_text())[0]["runs"]:
        command = run.replace(IMAGE_VENV, str(venv))
        print(f"smoke: RUN {command}", flush=True)
        subprocess.run(["sh", "-c", command], cwd=source, check=True)
    steps.done("ran the build stage's RUN lines (a fresh venv)")
    return venv


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers 204 and keeps what it was sent."""

    def __init__(self) -> None:
        received = self.received = []

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                received.append((self.headers.get("webhook-id"), json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alarms"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def service_environment(service: dict, runtime_env: dict, database_url: str, port: int, venv: Path,
                        extra: dict) -> dict:
    """The runtime stage's ENV, then the compose service's environment, rewritten for this machine."""
    env = {"HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    for key, value in runtime_env.items():
        env[key] = value.replace(IMAGE_VENV, str(venv)).replace("$PATH", os.environ.get("PATH", ""))
    env.update({name: interpolate(value, os.environ) for name, value in service["environment"].items()})
    if "DATABASE_URL" in env:
        env["DATABASE_URL"] = database_url
    if "CALIBRATION_HOST" in env:
        env["CALIBRATION_HOST"] = "127.0.0.1"  # the image binds 0.0.0.0 inside its own network
    env["CALIBRATION_PORT"] = str(port)
    env.update(extra)
    return env


def local_database_url(compose_url: str, admin_url: str, database: str) -> str:
    """The compose file's URL (scheme kept) pointed at the local server and the fresh database."""
    admin = urlsplit(admin_url)
    return urlunsplit((urlsplit(compose_url).scheme, admin.netloc, f"/{database}", "", ""))


def wait_for(what: str, check, deadline: float = DEADLINE_SECONDS, every: float = 0.3):
    """``check()``'s first truthy value, polled; fails the run after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise SystemExit(f"smoke: FAILED waiting for {what} ({deadline} s)")
        time.sleep(every)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def smoke(base: str, key: str, receiver: Receiver, steps: Steps) -> None:
    """The online loop through the installed client, as a user runs it."""
    import httpx
    import numpy as np

    import calibration_client

    if not calibration_client.__file__.startswith(sys.prefix):
        raise SystemExit(f"smoke: calibration_client came from {calibration_client.__file__}, not the fresh venv")
    rng = np.random.default_rng(0)

    def batch(n: int, scale: float = 1.0):
        """A model over-confident by 2 (true probabilities softmax(z / 2)), its logits times ``scale``."""
        logits = 3.0 * rng.standard_normal((n, 10))
        truth = np.exp(logits / 2 - (logits / 2).max(1, keepdims=True))
        truth /= truth.sum(1, keepdims=True)
        labels = np.minimum((truth.cumsum(1) < rng.random(n)[:, None]).sum(1), 9)
        return logits * scale, labels

    client = calibration_client.Client(base, api_key=key, timeout=120)
    http = httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=120)

    def jobs(kind: str) -> list[dict]:
        answer = http.get("/v1/jobs", params={"calibrator": NAME, "limit": 1000})
        answer.raise_for_status()
        listed = answer.json()["jobs"]
        failed = [j for j in listed if j["status"] == "failed"]
        if failed:
            raise SystemExit(f"smoke: FAILED: job(s) failed: {json.dumps(failed)[:2000]}")
        return [j for j in listed if j["kind"] == kind]

    def serve_and_label(n: int, offset: int) -> None:
        """Serve n drifted rows through production with logging and ids, then label them."""
        logits, labels = batch(n, scale=3.0)  # the drift: logits three times as large
        ids = [f"row-{offset + i}" for i in range(n)]
        served = http.post(f"/v1/calibrators/{NAME}@production/calibrate",
                           json={"logits": logits.tolist(), "ids": ids})
        served.raise_for_status()
        assert served.json()["version"] == 1 and served.json()["ids"] == ids, served.text[:300]
        # the prediction log is written every CALIBRATION_LOG_FLUSH_SECONDS (1 s) by each API process
        labelled = [0]

        def label() -> bool:
            labelled[0] += client.label(NAME, ids, labels.tolist())["labelled"]
            return labelled[0] == n

        wait_for(f"the labels of {n} logged rows", label, every=0.5)

    logits, labels = batch(3000)
    version = client.fit(NAME, logits, labels, method="temperature")
    assert version.version == 1 and version.diagnostics["converged"], version
    steps.done(f"fit: version 1, temperature {version.parameters['temperature']:.3f}")
    client.set_alias(NAME, "production", 1)
    client.gate(NAME, "production")
    client.set_logging(NAME, 1.0)
    policy = {"every_labels": 2000, "last": 2000, "holdout": 0, "method": "temperature"}
    http.put(f"/v1/calibrators/{NAME}/policy", json=policy).raise_for_status()
    steps.done("alias production -> 1 (gated), logging at 100%, refit policy")
    serve_and_label(2000, 0)
    steps.done("calibrate 2000 rows with ids (logged), their labels")
    alarms = wait_for("a succeeded alarms job that raised an alarm", lambda: [
        j for j in jobs("alarms") if j["status"] == "succeeded" and j["result"]["new_alarms"]])
    steps.done(f"scheduled alarms job {alarms[0]['id']} succeeded: {len(alarms[0]['result']['new_alarms'])} alarm(s)")
    delivered = wait_for("the webhook delivery", lambda: [
        d for d in http.get(f"/v1/calibrators/{NAME}/alarms/deliveries").json()["deliveries"]
        if d["state"] == "delivered"])
    sent_ids = {hook_id for hook_id, _ in receiver.received}
    assert {d["id"] for d in delivered} <= sent_ids, (delivered, receiver.received)
    assert all(body["calibrator"] == NAME for _, body in receiver.received)
    steps.done(f"webhook: {len(delivered)} delivery(ies) delivered and received")
    refit = wait_for("the refit policy's job", lambda: [
        j for j in jobs("refit") if j["status"] not in ("queued", "running")])
    assert refit[0]["status"] == "succeeded" and refit[0]["result"]["version"] == 2, refit
    steps.done(f"refit job {refit[0]['id']} (submitted by the scheduler's policy check): version 2")
    serve_and_label(1500, 2000)
    evaluation = client.evaluate(NAME, 2, "production")
    assert evaluation["verdict"] == "challenger_better", evaluation
    steps.done(f"evaluation of 2 against production on {evaluation['n_rows']} rows: {evaluation['verdict']}")
    client.promote(NAME, "production", 2, evaluation=evaluation["id"])
    served = client.calibrate(f"{NAME}@production", batch(5)[0])
    assert served.version == 2, served.version
    steps.done("promotion: production -> 2, served by version 2")
    wait_for("every job to finish", lambda: not [j for j in jobs("refit") + jobs("alarms")
                                                 if j["status"] in ("queued", "running")])
    finished = http.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]
    failed = [j for j in finished if j["status"] == "failed"]
    if failed:
        raise SystemExit(f"smoke: FAILED: job(s) failed: {json.dumps(failed)[:2000]}")
    steps.done(f"all {len(finished)} jobs finished, none failed "
               f"({', '.join(sorted({j['kind'] for j in finished}))})")
    client.close()
    http.close()


def deployed(venv: Path, folder: Path, admin_url: str, steps: Steps) -> None:
    """Postgres, migrate, serve and worker as docker-compose starts them, then the smoke run."""
    import httpx
    import psycopg

    database = f"calibration_smoke_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{database}"')
    compose = compose_services()
    runtime_env = stages((REPO / "Dockerfile").read_text())[-1]["env"]
    receiver, port = Receiver(), free_port()
    # the run's additions: the scheduler ticks every second, new alarms go to the local receiver
    extra = {"CALIBRATION_SCHEDULE_SECONDS": "1", "CALIBRATION_ALARM_WEBHOOK_URL": receiver.url}
    home = folder / "home"  # the image's WORKDIR: nothing importable in it
    home.mkdir()
    processes: list[subprocess.Popen] = []
    logs = folder / "logs"
    logs.mkdir()
    try:
        def environment(name: str) -> dict:
            service = compose[name]
            url = local_database_url(service["environment"]["DATABASE_URL"], admin_url, database)
            return service_environment(service, runtime_env, url, port, venv, extra)

        def start(name: str) -> subprocess.Popen:
            command = compose[name]["command"] or compose["api"]["command"]
            with open(logs / f"{name}.log", "ab") as output:
                return subprocess.Popen(command, cwd=home, env=environment(name), stdout=output,
                                        stderr=subprocess.STDOUT)

        migrate = start("migrate")
        if migrate.wait(timeout=120) != 0:
            raise SystemExit(f"smoke: FAILED: migrate: {(logs / 'migrate.log').read_text()[-3000:]}")
        steps.done("calibration-service migrate (compose's migrate service)")
        made = subprocess.run(["calibration-service", "keys", "create", "--name", "ops", "--scope", "admin"],
                              cwd=home, env=environment("api"), capture_output=True, text=True, check=True)
        key = made.stdout.split()[-1]
        steps.done("calibration-service keys create --name ops --scope admin")
        processes += [start("api"), start("worker")]
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            for process, name in zip(processes, ("api", "worker"), strict=True):
                if process.poll() is not None:
                    raise SystemExit(f"smoke: FAILED: {name} exited: {(logs / f'{name}.log').read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    pass
            except OSError:
                return False
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200

        wait_for("the API's /readyz", ready, deadline=60, every=0.2)
        unauthorised = httpx.get(f"{base}/v1/calibrators", timeout=5).status_code
        assert unauthorised == 401, f"API keys are on in the compose file, yet a call without one got {unauthorised}"
        steps.done("serve (2 uvicorn workers) and worker started, ready; keys required")
        smoke(base, key, receiver, steps)
    except BaseException:
        for name in ("migrate", "api", "worker"):
            if (logs / f"{name}.log").exists():
                print(f"--- {name}.log (tail)\n{(logs / f'{name}.log').read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        for process in reversed(processes):
            stop(process)
        receiver.server.shutdown()
        with psycopg.connect(admin_url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    steps.done("stopped serve and worker, dropped the database")


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--postgres", default=os.environ.get("CALIBRATION_SMOKE_POSTGRES_URL",
                                                               "postgresql://postgres@127.0.0.1:5432/postgres"))
    arguments.add_argument("--venv", type=Path, help="an installed environment (skips the build stage)")
    arguments.add_argument("--folder", type=Path, help=argparse.SUPPRESS)  # set when re-run in the venv
    arguments.add_argument("--started", type=float, help=argparse.SUPPRESS)  # its time.monotonic() at the start
    arguments.add_argument("--keep", action="store_true", help="keep the temporary folder")
    options = arguments.parse_args()
    steps = Steps(options.started)
    if options.folder is None:  # the build stage, with the interpreter CI has
        folder = Path(tempfile.mkdtemp(prefix="calibration-smoke-"))
        try:
            venv = options.venv or install(folder, steps)
            command = [str(venv / "bin" / "python"), __file__, "--venv", str(venv), "--folder", str(folder),
                       "--postgres", options.postgres, "--started", str(steps.start)]
            result = subprocess.run(command, env={**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"})
        finally:
            if not options.keep:
                shutil.rmtree(folder, ignore_errors=True)
        print(f"smoke: {'passed' if result.returncode == 0 else 'FAILED'} in {time.monotonic() - steps.start:.1f} s")
        return result.returncode
    deployed(options.venv, options.folder, options.postgres, steps)  # in the fresh venv: its client, numpy
    return 0


if __name__ == "__main__":
    sys.exit(main())
