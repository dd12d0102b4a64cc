"""Prediction sets through the client and the command line, against a live server: a set predictor
fitted on held-out rows of a real model has the core's thresholds, and the sets served (``.npy`` mask
and JSON) are the core's sets of the version's probabilities."""

from __future__ import annotations

import json

import numpy as np
import pytest

import calibration as cal
from calibration_client import InvalidInput, NotFound, PredictionSets
from calibration_client.cli import app
from tests.client.runner import CliRunner


@pytest.fixture
def fitted(client, cifar):
    logits, labels = cifar
    name = f"sets{np.random.default_rng().integers(1 << 30)}"
    client.fit(name, logits[:200], labels[:200], method="temperature")
    local = cal.create("temperature").fit(logits[:200], labels[:200])
    return name, local


def test_fit_list_and_serve_sets_equal_the_core(client, cifar, fitted):
    name, local = fitted
    logits, labels = cifar
    held_out, held_labels, batch = logits[200:350], labels[200:350], logits[350:]
    stored = client.fit_set_predictor(name, 1, held_out, held_labels, coverage=[0.8, 0.9], score="raps",
                                      k_reg=1, lam=0.05)
    core = cal.SetPredictor.fit(local.predict_proba(held_out), held_labels, score="raps", alphas=[0.2, 0.1],
                                k_reg=1, lam=0.05)
    assert stored["thresholds"] == pytest.approx(core.thresholds, abs=1e-12) and stored["n_samples"] == 150
    assert [p["id"] for p in client.set_predictors(name, 1)] == [stored["id"]]
    assert client.set_predictor(name, 1, stored["id"]) == stored

    expected = core.predict_sets(local.predict_proba(batch), 0.1)
    sets = client.calibrate(name, batch, outputs=["set"], coverage=0.9)  # .npy both ways: the uint8 mask
    assert isinstance(sets, PredictionSets) and sets.dtype == bool and np.array_equal(sets, expected)
    assert (sets.name, sets.version, sets.set_predictor, sets.coverage) == (name, 1, stored["id"], 0.9)
    assert sets.classes() == [np.flatnonzero(row).tolist() for row in expected]
    both = client.calibrate(name, batch, outputs=["probabilities", "set"], coverage=0.8)  # JSON
    assert np.array_equal(both, core.predict_sets(local.predict_proba(batch), 0.2))
    assert np.allclose(both.probabilities, local.predict_proba(batch), atol=1e-12)

    with pytest.raises(NotFound, match=r"no set predictor at coverage 0\.95"):
        client.calibrate(name, batch, outputs=["set"], coverage=0.95)
    with pytest.raises(InvalidInput, match="needs at least 19 held-out rows"):  # ceil(20 * 0.95) = 19
        client.fit_set_predictor(name, 1, held_out[:10], held_labels[:10], coverage=0.95)
    client.delete_set_predictor(name, 1, stored["id"])
    assert client.set_predictors(name, 1) == []


def test_the_command_line_fits_lists_and_serves_sets(service, client, cifar, fitted, tmp_path):
    name, local = fitted
    logits, labels = cifar
    np.savez(tmp_path / "held_out.npz", logits=logits[200:350], labels=labels[200:350])
    np.save(tmp_path / "batch.npy", logits[350:])
    runner = CliRunner()
    env = {"CALIBRATION_URL": service.url, "CALIBRATION_API_KEY": service.keys["admin"], "COLUMNS": "200"}

    def run(*args):
        return runner.invoke(app, [str(a) for a in args], env=env)

    fitted_sets = run("set-predictor", name, "1", tmp_path / "held_out.npz", "--coverage", "0.9", "--json")
    assert fitted_sets.exit_code == 0, fitted_sets.output
    stored = json.loads(fitted_sets.stdout)
    listed = run("set-predictors", name, "1")
    assert listed.exit_code == 0 and f"│ {stored['id']} │ aps" in listed.stdout.replace("  ", " ").replace("  ", " ")
    out = tmp_path / "sets.npy"
    served = run("sets", name, tmp_path / "batch.npy", "--coverage", "0.9", "--out", out)
    assert served.exit_code == 0, served.output
    core = cal.SetPredictor.fit(local.predict_proba(logits[200:350]), labels[200:350], score="aps", alphas=[0.1])
    assert np.array_equal(np.load(out), core.predict_sets(local.predict_proba(logits[350:]), 0.1).astype(np.uint8))
    shown = run("sets", name, tmp_path / "batch.npy", "--coverage", "0.9", "--rows", "2")
    assert shown.exit_code == 0 and f"set predictor {stored['id']} at coverage 0.9: 50 rows" in shown.stdout
    missing = run("sets", name, tmp_path / "batch.npy", "--coverage", "0.5")
    assert missing.exit_code == 3 and "no set predictor at coverage 0.5" in " ".join(missing.output.split())


def test_an_adaptive_set_predictor_from_the_client_and_the_command_line(service, client, cifar, fitted, tmp_path):
    name, _ = fitted
    logits, labels = cifar
    stored = client.fit_set_predictor(name, 1, logits[200:350], labels[200:350], coverage=0.9, score="aps",
                                      adaptive="aci", adaptive_gamma=0.01)
    assert (stored["options"]["adaptive"], stored["options"]["adaptive_gamma"]) == ("aci", 0.01)
    state = client.set_predictor(name, 1, stored["id"])["adaptive"][0]
    assert (state["method"], state["n_rows"], state["level"]) == ("aci", 0, pytest.approx(0.1))
    with pytest.raises(InvalidInput, match="adaptive"):  # marginal, non-randomised sets only
        client.fit_set_predictor(name, 1, logits[200:350], labels[200:350], coverage=0.9, adaptive="aci",
                                 class_conditional=True)

    np.savez(tmp_path / "held_out.npz", logits=logits[200:350], labels=labels[200:350])
    env = {"CALIBRATION_URL": service.url, "CALIBRATION_API_KEY": service.keys["admin"], "COLUMNS": "200"}
    ran = CliRunner().invoke(app, ["set-predictor", name, "1", str(tmp_path / "held_out.npz"), "--adaptive", "dtaci",
                                   "--json"], env=env)
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["options"]["adaptive"] == "dtaci"
