"""The ``calibration`` command line against a live server (SQLite and Postgres, API keys on): what it prints
and writes, and the exit codes scripts rely on (0 ok, 1 problem, 2 usage, 3 not found, 4 no
connection)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import calibration as cal
from calibration_client import Client
from calibration_client.cli import app
from tests.client.conftest import database, keyed_server
from tests.client.runner import CliRunner
from tests.helpers import DATA
from tests.service.support.live import free_port


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request, tmp_path_factory):
    with database(request.param, tmp_path_factory) as url, \
            keyed_server(url, tmp_path_factory.mktemp("log") / "server.log") as running:
        yield running


@pytest.fixture(scope="module")
def files(tmp_path_factory, cifar):
    logits, labels = cifar
    folder = tmp_path_factory.mktemp("files")
    np.savez(folder / "fit.npz", logits=logits[:300], labels=labels[:300])
    np.savez(folder / "check.npz", logits=logits[300:], labels=labels[300:])
    np.save(folder / "batch.npy", logits[300:])
    return folder


@pytest.fixture(scope="module")
def run(service):
    runner = CliRunner()
    environment = {"CALIBRATION_URL": service.url, "CALIBRATION_API_KEY": service.keys["admin"], "COLUMNS": "200"}

    def invoke(*args: str, key: str | None = "admin"):
        env = {**environment, "CALIBRATION_API_KEY": service.keys[key] if key else ""}
        return runner.invoke(app, [str(a) for a in args], env=env)

    return invoke


def test_help_documents_the_exit_codes(run):
    said = run("--help")
    assert said.exit_code == 0
    text = " ".join(said.stdout.split())
    for line in ("0 done", "1 the service answered with a problem", "2 usage error", "3 not found",
                 "4 the service could not be reached", "CALIBRATION_URL", "CALIBRATION_API_KEY"):
        assert line in text


def test_fit_calibrate_report_alias_versions(run, files, cifar, tmp_path):
    logits, labels = cifar
    local = cal.create("temperature").fit(logits[:300], labels[:300])
    fitted = run("fit", "cli", files / "fit.npz", "--class-names", ",".join(f"k{i}" for i in range(10)),
                 "--tag", "team=vision")
    assert fitted.exit_code == 0, fitted.output
    assert "cli version 1: temperature on 300 × 10 logits; converged: True" in fitted.stdout
    assert f"temperature={local.temperature_:.6f}" in fitted.stdout
    second = run("fit", "cli", files / "fit.npz", "--method", "vector", "--json")
    assert second.exit_code == 0 and json.loads(second.stdout)["version"] == 2

    out = tmp_path / "probabilities.npy"
    served = run("calibrate", "cli", files / "batch.npy", "--version", "1", "--out", out)
    assert served.exit_code == 0, served.output
    said = "".join(served.stdout.split())  # rich wraps long lines (a long temporary path) at the console's width
    assert "".join(f"wrote 100 × 10 probabilities from cli version 1 to {out}".split()) in said
    # float32 logits in the file: float32 probabilities, the float64 ones cast once
    assert np.load(out).dtype == np.float32
    assert np.array_equal(np.load(out), local.predict_proba(logits[300:]).astype(np.float32))

    alias = run("alias", "cli", "production", "1")
    assert alias.exit_code == 0 and "cli@production → version 1" in alias.stdout
    shown = run("calibrate", "cli@production", files / "check.npz", "--rows", "3")  # the npz's logits
    assert shown.exit_code == 0, shown.output
    expected = local.predict_proba(logits[300:303])
    assert "cli version 1: 100 rows × 10 classes (first 3)" in shown.stdout
    for row in range(3):
        top = int(expected[row].argmax())
        assert f"k{top}" in shown.stdout and f"{expected[row, top]:.4f}" in shown.stdout
    latest = run("calibrate", "cli", files / "batch.npy", "--out", out)
    assert latest.exit_code == 0 and "from cli version 2" in latest.stdout

    png = tmp_path / "diagram.png"
    reported = run("report", "cli@production", files / "check.npz", "--png", png)
    assert reported.exit_code == 0, reported.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    after = cal.nll(local.predict_proba(logits[300:]), labels[300:])
    assert "cli version 1 on 100 samples" in reported.stdout and f"{after:.4f}" in reported.stdout

    versions = run("versions", "cli")
    assert versions.exit_code == 0
    rows = [[cell.strip() for cell in line.strip("│ ").split("│")] for line in versions.stdout.splitlines()
            if line.startswith("│")]
    assert [(row[0], row[1], row[3], row[6]) for row in rows] == [("2", "vector", "300", ""),
                                                                      ("1", "temperature", "300", "production")]
    listed = run("calibrators", "--json")
    assert listed.exit_code == 0
    assert {c["name"]: c["aliases"] for c in json.loads(listed.stdout)}["cli"] == {"production": 1}


def test_compare_shows_the_table_and_the_choice(run, files, cifar):
    logits, labels = cifar
    shown = run("compare", files / "fit.npz", "--methods", "temperature,isotonic_multiclass", "--folds", "3")
    assert shown.exit_code == 0, shown.output
    local = cal.compare(logits[:300], labels[:300], ["temperature", "isotonic_multiclass"], folds=3)
    chosen = cal.select(local).to_dict()["chosen"]["name"]
    assert "3-fold comparison on 300 samples × 10 classes" in shown.stdout
    assert f"★ {chosen}" in shown.stdout and "selection: " in shown.stdout
    for result in local.results:
        assert f"{result.mean('nll'):.4f}" in shown.stdout
    as_json = run("compare", files / "fit.npz", "--folds", "3", "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["folds"] == 3


def test_jobs_follows_a_job_to_its_end(run, service, cifar):
    logits, labels = cifar
    with Client(service.url, api_key=service.keys["admin"]) as client:
        job = client.compare(logits, labels, methods=["temperature"], folds=3, wait=False)
    followed = run("jobs", job.id, "--wait")
    assert followed.exit_code == 0, followed.output
    assert f"job {job.id} (compare): succeeded, 100% done" in followed.stdout and "★ temperature" in followed.stdout
    assert run("jobs", "f" * 32).exit_code == 3


def test_exit_codes_for_scripts(run, service, files, tmp_path, cifar):
    with Client(service.url, api_key=service.keys["admin"]) as client:
        client.fit("exits", *cifar)
    missing = run("versions", "nobody")
    assert missing.exit_code == 3 and "no calibrator named 'nobody'" in missing.stderr
    no_alias = run("calibrate", "exits@nowhere", files / "batch.npy")
    assert no_alias.exit_code == 3 and "calibrator 'exits' has no alias 'nowhere'" in no_alias.stderr

    refused = run("fit", "x", files / "fit.npz", "--method", "no_such_method")
    assert refused.exit_code == 1 and "unknown method 'no_such_method'" in refused.stderr
    anonymous = run("calibrators", key=None)
    assert anonymous.exit_code == 1 and "401" in anonymous.stderr
    reader = run("fit", "x", files / "fit.npz", key="read")
    assert reader.exit_code == 1 and "this API key lacks the 'write' scope" in reader.stderr

    assert run("fit", "x", files / "batch.npy").exit_code == 2  # no labels in an .npy
    assert run("fit", "x", files / "fit.npz", "--options", "[1").exit_code == 2
    assert run("fit", "x", tmp_path / "absent.npz").exit_code == 2
    assert run("compare", files / "fit.npz", "--folds", "1").exit_code == 2
    assert run("no-such-command").exit_code == 2

    unreachable = run("--url", f"http://127.0.0.1:{free_port()}", "--retries", "0", "calibrators")
    assert unreachable.exit_code == 4 and "cannot reach" in unreachable.stderr


def test_the_console_script_runs(service):
    script = os.path.join(os.path.dirname(sys.executable), "calibration")
    environment = {**os.environ, "CALIBRATION_URL": service.url, "CALIBRATION_API_KEY": service.keys["read"]}
    done = subprocess.run([script, "methods", "--json"], env=environment, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "temperature" in {m["name"] for m in json.loads(done.stdout)}
    done = subprocess.run([script, "versions", "nobody"], env=environment, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3 and "no calibrator named 'nobody'" in done.stderr


def test_observe_refit_logging_and_label_from_the_command_line(run, files, tmp_path):
    appended = run("observe", "cli-online", files / "fit.npz", "--json")
    assert appended.exit_code == 0, appended.stdout
    assert json.loads(appended.stdout)["appended"] == 300
    refit = run("refit", "cli-online", "--last", "200", "--json")
    assert refit.exit_code == 0, refit.stdout
    assert json.loads(refit.stdout)["n_samples"] == 200
    assert run("logging", "cli-online", "0.5").exit_code == 0
    labels_file = tmp_path / "labels.csv"
    labels_file.write_text("id,label\nnot-logged,1\n")
    said = run("label", "cli-online", labels_file, "--json")
    assert said.exit_code == 0 and json.loads(said.stdout)["statuses"] == ["unknown"]
    summary = run("observations", "cli-online")
    assert summary.exit_code == 0 and "300 rows of logits" in " ".join(summary.stdout.split())
    windows = run("quality", "cli-online", "--window", "100", "--bootstrap", "0", "--json")
    assert windows.exit_code == 0, windows.stdout
    assert sum(w["n_rows"] for w in json.loads(windows.stdout)["windows"]) == 300
    table = run("quality", "cli-online", "--window", "100", "--bootstrap", "20")
    assert table.exit_code == 0 and "quality per 100" in table.stdout
    assert run("observations", "nobody").exit_code == 3  # not found


@pytest.mark.skipif(shutil.which("tmux") is None, reason="records the terminal with tmux")
def test_a_long_fit_shows_the_jobs_progress_in_a_real_terminal(service, tmp_path):
    """``calibration fit NAME FILE --method auto`` in a tmux terminal: the pane, captured every
    0.1 s, shows a progress bar whose percent rises while the job cross-validates, then the version.
    The frames are kept (``cli-progress.txt`` in CALIBRATION_SCREENSHOT_DIR, else a temporary folder)."""
    with np.load(DATA / "cifar10_resnet50_cross_entropy_val.npz") as data:
        np.savez(tmp_path / "val.npz", logits=data["logits"][:4000], labels=data["labels"][:4000])
    session = f"cli-{os.getpid()}"
    command = (f"CALIBRATION_URL={service.url} CALIBRATION_API_KEY={service.keys['admin']} "
               f"{sys.executable} -m calibration_client.cli fit tmux-auto {tmp_path / 'val.npz'} --method auto "
               f"--options '{{\"folds\": 8}}'; sleep 30")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "110", "-y", "30", command], check=True)
    frames, deadline = [], time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                  text=True).stdout
            if not frames or pane != frames[-1]:
                frames.append(pane)
            if "tmux-auto version 1" in pane:
                break
            time.sleep(0.1)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    folder = Path(os.environ.get("CALIBRATION_SCREENSHOT_DIR", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cli-progress.txt").write_text("\n--- frame ---\n".join(frames))
    percents = [int(p) for frame in frames for p in re.findall(r"fitting auto on 4000 samples.*?(\d+)%", frame)]
    assert "tmux-auto version 1" in frames[-1], frames[-1]
    assert len(set(percents)) >= 3 and percents == sorted(percents), percents  # a bar that moves forward
    assert any(5 < p < 80 for p in percents), percents  # inside the cross-validation, not only its ends


def test_observations_that_update_an_online_calibrator_say_which_version(run, files, cifar):
    fitted = run("fit", "cli-ots", files / "fit.npz", "--method", "online_temperature", "--json")
    assert fitted.exit_code == 0, fitted.stdout
    said = run("observe", "cli-ots", files / "check.npz")
    assert said.exit_code == 0, said.stdout
    assert "the online calibrator updated to version 2" in " ".join(said.stdout.split())
    logits, labels = cifar
    expected = cal.create("online_temperature").fit(logits, labels)  # the fit rows, then the observed ones
    latest = max(json.loads(run("versions", "cli-ots", "--json").stdout), key=lambda v: v["version"])
    assert latest["version"] == 2 and latest["parameters"] == expected.summary()
