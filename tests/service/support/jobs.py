"""What the job tests share: the data set they fit (``KIND``, ``X``, ``Y``: CIFAR-10 ResNet-50
validation logits), ``wait_for`` (poll a job until it leaves queued/running) and ``Workers``
(``calibration-service worker`` processes, as docker-compose starts them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from tests.helpers import REPO, load_split

KIND, X, Y = load_split("cifar10_resnet50_cross_entropy", "val")


def wait_for(http: httpx.Client, location: str, seconds: float = 120) -> dict:
    """The job at ``location`` once it has left queued/running, or as it is after ``seconds``. The
    polls start 0.05 s apart and back off to 0.25 s (each costs the client and the server CPU: a
    long fit is asked about a few times a second, not twenty)."""
    deadline = time.monotonic() + seconds
    pause = 0.05
    while True:
        job = http.get(location).json()
        if job["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return job
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


class Workers:
    """``calibration-service worker --concurrency N`` in a subprocess."""

    def __init__(self, database_url: str, concurrency: int, env: dict, log):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--concurrency", str(concurrency)], cwd=REPO,
            env={**os.environ, "DATABASE_URL": database_url, **env}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole group: the supervisor and every worker process, mid-job."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
