"""The online loop from the command line (issue #37) against a live server (SQLite and Postgres,
API keys on): ``calibrate`` with ``--ids``/``--id-column`` writes the ids next to the
probabilities, ``label`` posts labels by those ids and ``quality`` counts them; then ``alarms``,
``evaluate``, ``evaluations``, ``gate``, ``promote``, ``rollback``, ``history``, ``policy`` and
``label-shift``, each checked on the values it prints against the numeric core run in-process
on the same rows (or, where the service's own state decides, against its JSON answer)."""

from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest

import calibration as cal
from calibration_client import Client
from calibration_client.cli import app
from tests.client.conftest import database, keyed_server
from tests.client.runner import CliRunner
from tests.helpers import DATA

GENERATED = re.compile(r"[0-9a-f]{16}-(\d+)")


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request, tmp_path_factory):
    # the commands drive each online step by hand: with the scheduler on, it would evaluate the
    # alarms and run the policy first (scheduled runs are tested in tests/service/live/test_live.py)
    with database(request.param, tmp_path_factory) as url, \
            keyed_server(url, tmp_path_factory.mktemp("log") / "server.log",
                         env={"CALIBRATION_SCHEDULE_SECONDS": "0"}) as running:
        yield running


@pytest.fixture(scope="module")
def run(service):
    runner = CliRunner()
    environment = {"CALIBRATION_URL": service.url, "CALIBRATION_API_KEY": service.keys["admin"], "COLUMNS": "200"}

    def invoke(*args: str):
        said = runner.invoke(app, [str(a) for a in args], env=environment)
        said.text = " ".join(said.stdout.split())  # rich wraps and pads; compare words
        return said

    return invoke


@pytest.fixture
def client(service):
    with Client(service.url, api_key=service.keys["admin"], retries=0) as client:
        yield client


def table(stdout: str) -> list[list[str]]:
    """The cells of the rich tables in ``stdout``, row by row."""
    return [[cell.strip() for cell in line.strip().strip("│┃").split("│")] for line in stdout.splitlines()
            if line.lstrip().startswith("│")]


def test_calibrate_writes_the_ids_and_label_and_quality_count_them(run, client, cifar, tmp_path):
    """Ids from a text file (CSV out), from the input .npz's column (.npz out) and generated ones
    (the printed table) come back next to the probabilities the core computes; labelling all 200
    by id makes one quality window of 200 rows whose calibrated ECE is the core's."""
    logits, labels = cifar
    local = cal.create("temperature").fit(logits[:200], labels[:200])
    client.fit("ids-cli", logits[:200], labels[:200])
    assert run("logging", "ids-cli", "1").exit_code == 0

    ids = [f"order-{i}" for i in range(200, 280)]
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    np.save(tmp_path / "a.npy", logits[200:280])
    written = run("calibrate", "ids-cli", tmp_path / "a.npy", "--ids", tmp_path / "ids.txt", "--out",
                  tmp_path / "a.csv")
    assert written.exit_code == 0, written.output
    assert "wrote 80 × 10 ids and probabilities from ids-cli version 1" in written.text
    assert "80 rows logged" in written.text
    with (tmp_path / "a.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["id"] + [f"p_{k}" for k in range(10)]
    assert [row[0] for row in rows[1:]] == ids
    # float32 logits in the file: float32 probabilities (the float64 ones cast), written exactly in
    # float32's shortest repr (read back as float32)
    assert np.array_equal(np.array([row[1:] for row in rows[1:]], dtype=np.float32),
                          local.predict_proba(logits[200:280]).astype(np.float32))

    np.savez(tmp_path / "b.npz", logits=logits[280:360], request_id=np.arange(280, 360))
    written = run("calibrate", "ids-cli", tmp_path / "b.npz", "--id-column", "request_id", "--out",
                  tmp_path / "b.npz")
    assert written.exit_code == 0, written.output
    with np.load(tmp_path / "b.npz") as saved:
        assert saved["ids"].tolist() == [str(i) for i in range(280, 360)]
        assert saved["probabilities"].dtype == np.float32
        assert np.array_equal(saved["probabilities"], local.predict_proba(logits[280:360]).astype(np.float32))

    np.save(tmp_path / "c.npy", logits[360:400])
    shown = run("calibrate", "ids-cli", tmp_path / "c.npy", "--rows", "40")
    assert shown.exit_code == 0, shown.output
    assert "ids-cli version 1: 40 rows × 10 classes; 40 rows logged" in shown.text
    cells = table(shown.stdout)
    assert [row[0] for row in cells] == [str(i) for i in range(40)]
    generated = [row[1] for row in cells]
    assert all(GENERATED.fullmatch(i) for i in generated) and len({i.rpartition("-")[0] for i in generated}) == 1
    expected = local.predict_proba(logits[360:400])
    assert [row[3] for row in cells] == [f"{p:.4f}" for p in expected.max(axis=1)]

    every = ids + [str(i) for i in range(280, 360)] + generated
    with (tmp_path / "labels.csv").open("w") as handle:
        handle.write("id,label\n" + "".join(f"{i},{y}\n" for i, y in zip(every, labels[200:400], strict=True)))
    posted = run("label", "ids-cli", tmp_path / "labels.csv")
    assert posted.exit_code == 0 and "ids-cli: 200 labelled" in posted.text, posted.output

    quality = run("quality", "ids-cli", "--window", "200", "--bootstrap", "0")
    assert quality.exit_code == 0, quality.output
    (window,) = table(quality.stdout)
    served = local.predict_proba(logits[200:400])
    assert window[:3] == ["rows 0-199", "200", f"{cal.ece(served, labels[200:400]):.4f}"], window
    assert window[4] == f"{cal.nll(served, labels[200:400]):.4f}"


def test_alarms_evaluate_promote_rollback_and_policy(run, client):
    """A first version fitted on shuffled labels (probabilities near uniform, so its confidence
    far under its accuracy) serves 200 labelled rows: its labelled monitor alarms. A second
    version fitted on the true labels wins the evaluation on 150 rows held out from both, as the
    core's ``compare_losses`` on the same rows says; the gated alias refuses it without the
    evaluation and takes it with it; rollback, history and a refit policy follow. (600 rows, 350 held
    out: the floored NLL's 36-nat bound needs ~300 rows to see even a 1.9-nat gain.)"""
    with np.load(DATA / "cifar10_resnet50_cross_entropy_val.npz") as data:
        logits, labels = data["logits"][:600], data["labels"][:600]
    shuffled = np.random.default_rng(0).permutation(labels[:150])
    bad = cal.create("temperature").fit(logits[:150], shuffled)
    good = cal.create("temperature").fit(logits[:250], labels[:250])
    client.fit("loop", logits[:150], shuffled)
    client.set_alias("loop", "production", 1)
    client.set_logging("loop", 1.0)
    served = client.calibrate("loop@production", logits[150:350], ids=[f"r{i}" for i in range(150, 350)])
    assert served.ids is not None and client.label("loop", served.ids, labels[150:350])["counts"] == {"labelled": 200}

    quiet = run("alarms", "loop")
    assert quiet.exit_code == 0 and "loop: no alarms" in quiet.text and "no monitors yet" in quiet.text
    assert run("alarms", "loop", "--alpha", "0.01").exit_code == 2  # options go with --evaluate
    alarmed = run("alarms", "loop", "--evaluate", "--alpha", "0.01")
    assert alarmed.exit_code == 0, alarmed.output
    state = client.alarms("loop")
    (monitor,) = [m for m in state["monitors"] if m["signal"] == "labelled"]
    assert monitor["alarm"] and monitor["n_rows"] == 200
    assert f"loop: 1 alarm: version 1 labelled at row {monitor['alarm_rows']}; 1 new" in alarmed.text
    (row,) = [r for r in table(alarmed.stdout) if r[1] == "labelled"]
    ece = cal.ece(bad.predict_proba(logits[150:350]), labels[150:350])
    assert row == ["1", "labelled", "200", f"{math.exp(monitor['log_e_value']):.3g}", "100",
                   f"at row {monitor['alarm_rows']}", f"{ece:.4f}"]
    assert ece > 0.5  # near-uniform probabilities on rows it mostly ranks right

    client.fit("loop", logits[:250], labels[:250])
    client.observe("loop", logits[250:], labels[250:])  # created after both versions: held out from both
    evaluated = run("evaluate", "loop", "2", "production", "--bootstrap", "0")
    assert evaluated.exit_code == 0, evaluated.output
    held_out = (good.predict_proba(logits[250:]), bad.predict_proba(logits[250:]))
    core = cal.compare_losses(*held_out, labels[250:], 0.05, decide_on="nll")
    assert core["verdict"] == "challenger_better"
    assert (f"loop: version 2 against version 1 on {len(labels) - 250} rows: challenger_better (alpha = 0.05, "
            "decided on nll)") in evaluated.text
    cells = {r[0]: r[1:] for r in table(evaluated.stdout)}
    for loss in ("nll", "brier"):
        low, high = core[loss]["confidence_sequence"]
        assert cells[loss] == [f"{core[loss]['challenger']:.4f}", f"{core[loss]['champion']:.4f}",
                               f"{core[loss]['difference']:+.4f}", f"[{low:+.4f}, {high:+.4f}]"]
    assert cells["ECE"][:2] == [f"{cal.ece(p, labels[250:]):.4f}" for p in held_out]
    evaluation = re.search(r"evaluation ([0-9a-f]{32})", evaluated.text).group(1)
    assert f"promote with: calibration promote loop ALIAS 2 --evaluation {evaluation}" in evaluated.text
    listed = run("evaluations", "loop")
    assert listed.exit_code == 0 and table(listed.stdout)[0][:6] == [evaluation, "2", "1", str(len(labels) - 250),
                                                                      "0.05", "challenger_better"]
    again = run("evaluations", "loop", evaluation)
    assert again.exit_code == 0 and table(again.stdout) == table(evaluated.stdout)

    gated = run("gate", "loop", "production")
    assert gated.exit_code == 0 and "loop@production moves only with an evaluation" in gated.text
    refused = run("promote", "loop", "production", "2")
    assert refused.exit_code == 1 and "409" in refused.stderr and "evaluation" in refused.stderr
    promoted = run("promote", "loop", "production", "2", "--evaluation", evaluation)
    assert promoted.exit_code == 0, promoted.output
    assert f"loop@production → version 2 (was 1; evidence {evaluation})" in promoted.text
    rolled = run("rollback", "loop", "production")
    assert rolled.exit_code == 0 and "loop@production → version 1 (was 2)" in rolled.text, rolled.output
    opened = run("gate", "loop", "production", "--off")
    assert opened.exit_code == 0 and "loop@production moves freely" in opened.text
    moves = run("history", "loop", "production")
    assert moves.exit_code == 0 and "loop@production → version 1" in moves.text
    actors = [move["actor"] or "—" for move in client.alias_history("loop", "production")["moves"]]
    assert [r[1:] for r in table(moves.stdout)] == [["rollback", "2", "1", actors[0], "—"],
                                                    ["set", "1", "2", actors[1], evaluation],
                                                    ["set", "—", "1", actors[2], "—"]]
    assert run("promote", "loop", "production", "9").exit_code == 3  # no version 9

    assert run("policy", "show", "loop").exit_code == 3  # no policy yet
    assert run("policy", "set", "loop").exit_code == 1  # no trigger: the service's 422
    set_ = run("policy", "set", "loop", "--every-labels", "100", "--method", "temperature", "--alias", "production",
               "--holdout", "0.5")
    assert set_.exit_code == 0, set_.output
    line = ("loop refits every 100 labels: temperature on the newest 50000 observations less 50% held out; "
            "must beat production at alpha 0.05")
    assert line in set_.text
    shown = run("policy", "show", "loop")
    assert shown.exit_code == 0 and line in shown.text and "last run: never" in shown.text
    idle = run("policy", "run", "loop")
    assert idle.exit_code == 0 and "loop: no trigger fired since" in idle.text, idle.output
    client.observe("loop", logits[:100], labels[:100])
    refitted = run("policy", "run", "loop")
    assert refitted.exit_code == 0, refitted.output
    job = client.policy("loop")["last_job"]
    result = client.job(job).result  # the refit's evaluation: version 3 against production (version 1)
    assert result["version"] == 3 and client.versions("loop")[0].version == 3
    assert re.search(r"loop version 3 refitted: 100 labelled observations since \S+ \(every 100\); "
                     rf"{result['verdict']} \(evaluation {result['evaluation']}\)$", refitted.text), refitted.text
    assert f"last job: {job}" in run("policy", "show", "loop").text


def test_label_shift_sees_a_shift_to_two_classes(run, client, cifar):
    """Uploads of all ten classes are the reference; the logged predictions are of rows labelled
    0 or 1 only. The printed source priors are the uploads' class frequencies, EM puts most of the
    mass on classes 0 and 1, and the test rejects: the suggestion is to adjust."""
    logits, labels = cifar
    client.fit("shift", logits[:200], labels[:200])
    client.observe("shift", logits[:200], labels[:200])
    client.set_logging("shift", 1.0)
    two = np.flatnonzero(np.isin(labels[200:], (0, 1))) + 200
    client.calibrate("shift", logits[two])
    said = run("label-shift", "shift", "--alpha", "0.05")
    assert said.exit_code == 0, said.output
    answer = client.label_shift("shift", alpha=0.05)
    test = answer["suggestion"]["test"]
    assert test["p_value"] < 0.05
    assert (f"shift: {len(two)} logged predictions against 200 labelled rows: shifted (likelihood ratio "
            f"{test['statistic']:.4g} on {test['degrees_of_freedom']} df, p = {test['p_value']:.3g}, "
            "alpha = 0.05)") in said.text
    rows = table(said.stdout)
    frequencies = np.bincount(labels[:200], minlength=10) / 200
    assert [r[1] for r in rows] == [f"{f:.4f}" for f in frequencies]
    em = [float(r[2]) for r in rows]
    assert em[0] + em[1] > 0.8
    assert [r[4] for r in rows] == [f"{p:.4f}" for p in answer["suggestion"]["suggested_priors"]]
    assert "adjust: calibrate with \"priors\"" in said.text
    assert run("label-shift", "nobody").exit_code == 3


@pytest.mark.parametrize("command", ["calibrate", "observe", "logging", "label", "observations", "refit", "quality",
                                     "alarms", "label-shift", "evaluate", "evaluations", "promote", "gate",
                                     "rollback", "history", "policy show", "policy set", "policy run"])
def test_every_online_command_has_help_with_an_example(run, command):
    said = run(*command.split(), "--help")
    assert said.exit_code == 0
    assert "Examples" in said.text and f"$ calibration {command} " in said.text
