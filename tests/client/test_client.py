"""The Python client against a live server (SQLite and Postgres): what it returns equals what
the numeric core computes in-process on the same arrays, problems arrive as typed exceptions
with the server's detail, and a compare job reports increasing progress."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calibration as cal
from calibration_client import (
    AsyncClient,
    Calibrated,
    Client,
    Conflict,
    Forbidden,
    InvalidInput,
    Job,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Version,
)
from calibration_client import _protocol as protocol
from calibration_client import _transport as transport
from calibration_client._transport import Call, PlainHTTPTransport
from tests.client.conftest import MAX_BODY_BYTES
from tests.helpers import REPO

#: the start of a program run by ``run_python``: the command line's ``main`` and ``port``, a port that
#: nothing listens on (bound, then closed), so a command that reaches for the server exits 4
UNREACHABLE_PORT = ("import socket, sys; from calibration_client.cli import main\n"
                    "with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n")


def run_python(code: str) -> None:
    """Run ``code`` in a new interpreter (a fresh ``sys.modules``) from the repository; it must succeed."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_client_imports_neither_the_service_nor_the_core_and_its_command_line_loads_numpy_and_httpx_on_use():
    """``--help`` and usage errors need neither numpy nor httpx (nor rich's progress bars): the
    package's clients and models, and the commands' arrays, are loaded when first used; the client
    (httpx) loads numpy with its arrays (``Calibrated``), not before."""
    code = ("import sys, calibration_client, calibration_client.cli; from calibration_client import NotFound; "
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('app', 'calibration', 'numpy', 'httpx') "
            "or m == 'rich.progress'); "
            "assert not loaded, loaded; "
            "from calibration_client import Client; assert 'httpx' in sys.modules and 'numpy' not in sys.modules; "
            "from calibration_client import Calibrated; assert 'numpy' in sys.modules")
    run_python(code)


def test_the_command_line_does_not_import_httpx_s_own_command_line_nor_numpy_for_a_command_without_arrays():
    """httpx's package imports its command line (``httpx._main``: click, pygments, rich's syntax
    highlighting) whenever click is installed; ``calibration`` needs none of it, so a command that
    talks to a server loads httpx without it (a start-up cost paid by every command). A command
    that sends and reads no array (``calibrators``) does not load numpy either."""
    code = UNREACHABLE_PORT + (
        "sys.argv = ['calibration', '--url', f'http://127.0.0.1:{port}', 'calibrators']\n"
        "try: main()\n"
        "except SystemExit as exit: assert exit.code == 4, exit.code  # cannot reach the server\n"
        "loaded = sorted(m for m, module in sys.modules.items() if module is not None\n"
        "                and (m.split('.')[0] in ('click', 'pygments') or m == 'httpx._main'))\n"
        "assert 'httpx' in sys.modules and 'calibration_client.client' in sys.modules, 'no client made'\n"
        "assert not loaded, loaded\n"
        "assert 'numpy' not in sys.modules")
    run_python(code)


def test_the_command_line_parses_its_arguments_without_pydantic():
    """The client never uses pydantic, and neither does the command line's parsing of a command's
    arguments (a string, an int, floats, a file that must exist: typer before 0.29, which builds a
    pydantic ``TypeAdapter`` for each, pydantic's import included, in every ``calibration`` process);
    the values still arrive checked and converted: a timeout under its minimum is a usage error."""
    code = UNREACHABLE_PORT + (
        "def run(*args):\n"
        "    sys.argv = ['calibration', '--url', f'http://127.0.0.1:{port}', *args]\n"
        "    try: main()\n"
        "    except SystemExit as exit: return exit.code\n"
        "assert run('--timeout', '0.05', 'calibrators') == 2  # under the option's minimum, 0.1\n"
        "assert run('--timeout', '5', '--retries', '0', 'report', 'resnet50', 'examples/val.npz', '--version',\n"
        "           '1', '--bins', '10') == 4  # parsed, then the server cannot be reached\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')]")
    run_python(code)


def test_a_client_of_an_http_service_reads_no_certificates_and_its_https_requests_verify():
    """A client of an ``http://`` service makes no SSL context with the trusted certificates (the CA
    bundle read, ~70 ms of CPU in every ``calibration`` command); its plain connections' context
    trusts no certificate (TLS through it could verify nothing), and an ``https://`` request gets
    httpx's default transport, whose context has the CA bundle and checks host names. Transport
    options, or an ``https://`` service, leave the transport to httpx."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens: each request is refused
    with Client(f"http://127.0.0.1:{port}", retries=0) as client:
        transport = client._http._transport
        assert isinstance(transport, PlainHTTPTransport)
        plain = transport._plain._pool._ssl_context
        assert plain.cert_store_stats()["x509_ca"] == 0 and plain.verify_mode == ssl.CERT_REQUIRED
        assert transport._tls is None
        with pytest.raises(httpx.ConnectError):
            client._http.get(f"https://127.0.0.1:{port}/v1/methods")
        assert transport._tls is not None
        tls = transport._tls._pool._ssl_context
        assert tls.cert_store_stats()["x509_ca"] > 0 and tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname
    for url, options in ((f"https://127.0.0.1:{port}", {}), (f"http://127.0.0.1:{port}", {"verify": False})):
        with Client(url, retries=0, **options) as client:
            assert type(client._http._transport) is httpx.HTTPTransport


def test_fit_and_calibrate_equal_the_core_in_process(client, cifar):
    logits, labels = cifar
    fit_x, fit_y, batch = logits[:300], labels[:300], logits[300:]
    version = client.fit("resnet", fit_x, fit_y, method="temperature", class_names=[f"c{i}" for i in range(10)],
                         description="client test", tags={"team": "vision"})
    local = cal.create("temperature").fit(fit_x, fit_y)
    assert isinstance(version, Version) and version.name == "resnet" and version.version == 1
    assert version.parameters["temperature"] == local.temperature_
    assert (version.n_samples, version.n_classes, version.input) == (300, 10, "logits")
    assert version.tags == {"team": "vision"} and version.class_names[3] == "c3"
    assert version.diagnostics["converged"] is True
    expected = local.predict_proba(batch)

    served = client.calibrate("resnet", batch)  # .npy both ways: float32 logits, float32 probabilities
    assert isinstance(served, Calibrated) and batch.dtype == served.dtype == np.float32
    assert np.array_equal(served, expected.astype(np.float32))
    assert served.name == "resnet" and served.version == 1  # the binary answer's X-Calibrator-Version
    pinned = client.calibrate("resnet", batch, version=1)
    assert np.array_equal(pinned, expected.astype(np.float32)) and pinned.version == 1
    named = client.calibrate("resnet", batch, with_version=True)  # JSON, which names the version
    assert np.array_equal(named, expected) and (named.name, named.version) == ("resnet", 1)

    # probabilities in, probabilities out: the same equality
    probabilities = cal.softmax(fit_x.astype(np.float64))
    version = client.fit("resnet-probs", probabilities=probabilities, labels=fit_y, method="isotonic_multiclass")
    local = cal.create("isotonic_multiclass", {"input": "probabilities"}).fit(probabilities, fit_y)
    assert version.input == "probabilities"
    batch_p = cal.softmax(batch.astype(np.float64))
    assert np.array_equal(client.calibrate("resnet-probs", batch_p, input="probabilities"),
                          local.predict_proba(batch_p))


def _memory(array: np.ndarray):
    """What an array's memory belongs to: the end of its chain of bases."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


def test_calibrate_answers_in_the_precision_sent_or_asked(client, cifar):
    """float32 logits get float32 probabilities (the float64 ones, cast), float64 logits float64;
    ``dtype=`` asks for either. A binary answer's array is a writable view of the one buffer its
    body was read into (``transport.read_owned``), not a second copy of httpx's body."""
    logits, labels = cifar
    client.fit("precise", logits[:300], labels[:300])
    expected = cal.create("temperature").fit(logits[:300], labels[:300]).predict_proba(logits[300:])
    single = client.calibrate("precise", logits[300:])
    assert single.dtype == np.float32 and np.array_equal(single, expected.astype(np.float32))
    assert np.max(np.abs(single - expected)) <= 1e-6
    body = _memory(single)
    assert isinstance(body, memoryview) and not body.readonly and single.flags.writeable
    assert single.nbytes < body.nbytes <= single.nbytes + 128  # the body: a .npy header and the array
    single[0, 0] = 2.0  # its own memory: writing it changes nothing else
    assert single[0, 0] == 2.0 and np.array_equal(single[1:], expected[1:].astype(np.float32))
    double = client.calibrate("precise", logits[300:].astype(np.float64))
    assert double.dtype == np.float64 and np.array_equal(double, expected)
    asked = client.calibrate("precise", logits[300:], dtype="float64")
    assert asked.dtype == np.float64 and np.array_equal(asked, expected) and asked.version == 1
    narrowed = client.calibrate("precise", logits[300:].astype(np.float64), dtype="float32")
    assert narrowed.dtype == np.float32 and np.array_equal(narrowed, expected.astype(np.float32))


def test_each_call_goes_to_the_url_and_query_it_names(service, cifar):
    """The URL every request is sent to, as the server receives it: the service's address, the
    path (names quoted, ``@`` kept) and the query in the order the call gives it (``+`` for spaces,
    the rest percent-encoded), seen by httpx's own request hook, of both clients; the server reads
    the same values back."""
    logits, labels = cifar
    base, sent = service.url, []

    def record(request: httpx.Request) -> None:
        sent.append((request.method, str(request.url)))

    async def arecord(request: httpx.Request) -> None:
        record(request)

    with Client(base, api_key=service.keys["admin"], retries=0, event_hooks={"request": [record]}) as client:
        version = client.fit("urls", logits[:300], labels[:300], description="a b&c=d+\u00e9",
                             tags={"team": "vision x"}, class_names=[f"c{i}" for i in range(10)])
        client.set_alias("urls", "prod", 1)
        client.calibrate("urls@prod", logits[300:305])
        client.calibrate("urls", logits[300:305], version=1, dtype="float64")
        assert len(client.versions("urls")) == 1
    assert (version.description, version.tags) == ("a b&c=d+\u00e9", {"team": "vision x"})

    async def scenario():
        async with AsyncClient(base, api_key=service.keys["admin"], retries=0,
                               event_hooks={"request": [arecord]}) as client:
            await client.calibrate("urls", logits[300:305], input="logits")
    asyncio.run(scenario())
    names = ",".join(f"c{i}" for i in range(10)).replace(",", "%2C")
    assert sent == [
        ("POST", f"{base}/v1/calibrators/urls/versions?method=temperature&description=a+b%26c%3Dd%2B%C3%A9"
                 f"&tags=%7B%22team%22%3A+%22vision+x%22%7D&class_names={names}"),
        ("PUT", f"{base}/v1/calibrators/urls/aliases/prod"),
        ("POST", f"{base}/v1/calibrators/urls@prod/calibrate?input=logits"),
        ("POST", f"{base}/v1/calibrators/urls/versions/1/calibrate?input=logits&dtype=float64"),
        ("GET", f"{base}/v1/calibrators/urls/versions?page_size=1000"),
        ("POST", f"{base}/v1/calibrators/urls/calibrate?input=logits"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3),
       st.dictionaries(st.text(max_size=8), st.text(max_size=12) | st.integers() | st.booleans(), max_size=4),
       st.sampled_from(["http://127.0.0.1:8000", "http://example.com/prefix", "https://h.example:8443/a%20b"]))
def test_a_calls_url_is_the_one_httpx_merges_from_base_url_path_and_params(segments, params, base):
    """``_transport.request``'s URL is the one ``httpx.Client(base_url=...)`` makes of the same
    path and ``params``: the query is encoded by httpx, the whole URL parsed once."""
    path = "/v1/" + "/".join(protocol._segment(segment) for segment in segments)
    # nothing is sent: a mock transport spares each example the default one's TLS context (~20 ms)
    with httpx.Client(base_url=base, transport=httpx.MockTransport(lambda request: httpx.Response(200))) as http:
        ours = transport.request(http, base, Call("GET", path, params=params))
        assert ours.url == http.build_request("GET", path, params=params).url
        assert str(ours.url) == str(http.build_request("GET", path, params=params).url)


def test_report_and_metrics_equal_the_core(client, cifar):
    logits, labels = cifar
    client.fit("reported", logits, labels)
    calibrated = cal.create("temperature").fit(logits, labels).predict_proba(logits)
    raw = cal.softmax(logits.astype(np.float64))
    report = client.report("reported", logits, labels, n_bins=10)
    assert (report["name"], report["version"], report["n_samples"], report["n_bins"]) == ("reported", 1, 400, 10)
    assert report["after"]["metrics"]["nll"] == pytest.approx(cal.nll(calibrated, labels), rel=1e-12)
    assert report["after"]["metrics"]["ece"] == pytest.approx(cal.ece(calibrated, labels, n_bins=10), rel=1e-12)
    assert report["before"]["metrics"]["nll"] == pytest.approx(cal.nll(raw, labels), rel=1e-12)
    png = client.report("reported", logits, labels, image="png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    measured = client.metrics(logits, labels, n_bins=10)
    assert measured["n_samples"] == 400
    assert measured["metrics"]["brier"] == pytest.approx(cal.brier(raw, labels), rel=1e-12)
    assert measured["metrics"]["ece"] == pytest.approx(cal.ece(raw, labels, n_bins=10), rel=1e-12)


def test_the_registry_versions_aliases_and_deletes(client, cifar):
    logits, labels = cifar
    first = client.fit("registry", logits, labels, method="temperature")
    second = client.fit("registry", logits, labels, method="vector")
    assert (first.version, second.version) == (1, 2)
    assert [v.version for v in client.versions("registry")] == [2, 1]
    assert client.version("registry", 1).parameters == first.parameters
    assert client.set_alias("registry", "production", 1) == {"name": "registry", "alias": "production",
                                                             "version": 1}
    assert client.calibrator("registry").aliases == {"production": 1}
    assert "registry" in [c.name for c in client.calibrators()]
    served = client.calibrate("registry@production", logits[:5], with_version=True)
    assert served.version == 1
    assert np.array_equal(served, cal.create("temperature").fit(logits, labels).predict_proba(logits[:5]))
    with pytest.raises(Conflict) as conflict:
        client.delete_version("registry", 1)
    assert conflict.value.status == 409 and "production" in conflict.value.detail
    client.delete_alias("registry", "production")
    client.delete_version("registry", 1)
    assert [v.version for v in client.versions("registry")] == [2]
    client.delete_calibrator("registry")
    with pytest.raises(NotFound) as missing:
        client.versions("registry")
    assert missing.value.detail == "no calibrator named 'registry'"


def test_problems_are_typed_exceptions_with_the_servers_fields(service, client, cifar):
    logits, labels = cifar
    with pytest.raises(NotFound) as missing:
        client.calibrate("nobody", logits[:3])
    problem = missing.value
    assert (problem.status, problem.title, problem.detail) == (404, "Not Found", "no calibrator named 'nobody'")
    assert problem.instance == "/v1/calibrators/nobody/calibrate" and len(problem.request_id) == 32
    with pytest.raises(InvalidInput) as invalid:
        client.fit("bad", logits, labels, method="no_such_method")
    assert invalid.value.status == 422 and invalid.value.detail.startswith("unknown method 'no_such_method'")
    with pytest.raises(InvalidInput) as invalid:
        client.fit("bad", logits, labels[:-1])
    assert "labels" in invalid.value.detail
    with pytest.raises(PayloadTooLarge) as large:
        client.calibrate("nobody", np.zeros((MAX_BODY_BYTES // 8 + 1024, 1)))
    assert large.value.status == 413 and str(MAX_BODY_BYTES) in large.value.detail
    with Client(service.url, retries=0) as anonymous, pytest.raises(Unauthorized) as unauthorized:
        anonymous.calibrators()
    assert unauthorized.value.status == 401 and unauthorized.value.headers["www-authenticate"].startswith("Bearer")
    with Client(service.url, api_key=service.keys["read"], retries=0) as reader:
        assert isinstance(reader.calibrators(), list)
        with pytest.raises(Forbidden) as forbidden:
            reader.fit("not-allowed", logits, labels)
    assert forbidden.value.status == 403 and "write" in forbidden.value.detail


def test_a_compare_job_reports_increasing_progress_and_the_cores_result(client, cifar):
    logits, labels = cifar
    seen: list[float] = []
    result = client.compare(logits, labels, folds=5, progress=seen.append, poll=0.01)
    assert seen == sorted(seen) and len(set(seen)) == len(seen) and seen[-1] == 100.0
    assert any(0 < p < 100 for p in seen), seen  # a percent from the running job, not just start and end
    local = cal.compare(logits, labels, folds=5, seed=0)
    chosen = cal.select(local).to_dict()["chosen"]
    assert result["selection"]["chosen"] == chosen
    assert [m["name"] for m in result["methods"]] == [r.candidate.name for r in local.results]
    expected = [r.mean("nll") for r in local.results]  # JSON has no infinity: the server sends null
    assert [m["mean"]["nll"] for m in result["methods"]] == [
        None if not np.isfinite(value) else pytest.approx(value, rel=1e-9) for value in expected]

    # named candidates travel as JSON (the .npz form has no place for the list); wait=False gives the job
    job = client.compare(logits, labels, methods=["temperature", "isotonic_multiclass"], folds=3, wait=False)
    assert isinstance(job, Job) and job.kind == "compare"
    done = client.wait_for_job(job.id, poll=0.02)
    assert done.status == "succeeded" and done.percent == 100.0
    assert [m["name"] for m in done.result["methods"]] == ["temperature", "isotonic_multiclass"]
    assert client.job(job.id).result == done.result
    with pytest.raises(NotFound) as missing:
        client.job("0" * 32)
    assert missing.value.detail.startswith(f"no job '{'0' * 32}'")


def test_the_async_client_does_the_same(service, cifar):
    logits, labels = cifar

    async def scenario():
        seen = []

        async def progress(percent):
            seen.append(percent)

        async with AsyncClient(service.url, api_key=service.keys["admin"], retries=0) as client:
            version = await client.fit("async", logits, labels)
            served, comparison = await asyncio.gather(
                client.calibrate("async", logits[:7], version=version.version),
                client.compare(logits, labels, methods=["temperature"], folds=4, progress=progress, poll=0.01))
            with pytest.raises(NotFound):
                await client.version("async", 99)
        return version, served, comparison, seen

    version, served, comparison, seen = asyncio.run(scenario())
    local = cal.create("temperature").fit(logits, labels)
    assert version.parameters["temperature"] == local.temperature_
    assert served.dtype == np.float32  # float32 logits: float32 probabilities, the float64 ones cast
    assert np.array_equal(served, local.predict_proba(logits[:7]).astype(np.float32))
    assert isinstance(_memory(served), memoryview) and served.flags.writeable  # read into its own buffer
    assert served.version == version.version
    assert comparison["selection"]["chosen"]["name"] == "temperature"
    assert seen == sorted(seen) and seen[-1] == 100.0


def test_the_online_loop_through_the_client(client, cifar):
    """Observations appended in two chunks and fitted from the log equal the inline fit; served
    predictions logged with the client's ids become feedback of the version that served them."""
    logits, labels = cifar
    client.observe("online", logits[:200], labels[:200])
    client.observe("online", logits[200:], labels[200:], observed_at="2026-11-01T00:00:00+00:00")
    summary = client.observations("online")
    assert summary["total_rows"] == len(labels) and summary["by_source"] == {"upload": len(labels)}
    stored = client.fit_stored("online", "temperature")
    inline = client.fit("online-inline", logits, labels)
    assert stored.parameters == inline.parameters
    assert client.fit_stored("online", observations={"last": 150}).n_samples == 150
    assert client.set_logging("online", 1.0)["sample_rate"] == 1.0
    served = client.calibrate("online", logits[:5], binary=False)
    assert served.version == 2  # the newest of the two fits from the log
    answer = client.label("online", ["unknown-id"], [0])
    assert answer["statuses"] == ["unknown"]


def test_quality_evaluations_and_gated_moves_through_the_client(client, cifar):
    """Quality windows of the stored rows, an evaluation, a gated alias refusing a move without
    evidence (a typed Conflict), the history and a rollback, all through the client."""
    logits, labels = cifar
    client.fit("gated", logits[:150], labels[:150])
    client.promote("gated", "production", 1)
    client.observe("gated", logits[150:250], labels[150:250])
    client.fit("gated", logits[:250], labels[:250])
    client.observe("gated", logits[250:], labels[250:])  # after both versions: held out from both
    windows = client.quality("gated", window="50", bootstrap=0)
    assert windows["name"] == "gated"
    assert client.gate("gated", "production")["require_evaluation"] is True
    with pytest.raises(Conflict) as refused:
        client.promote("gated", "production", 2)
    assert "evaluation" in refused.value.detail
    evaluation = client.evaluate("gated", 2, "production", alpha=0.05)
    assert client.evaluations("gated")["evaluations"][0]["id"] == evaluation["id"]
    assert evaluation["n_rows"] == len(labels) - 250 and evaluation["verdict"] in (
        "challenger_better", "champion_better", "inconclusive")
    if evaluation["verdict"] == "challenger_better":
        assert client.promote("gated", "production", 2, evaluation["id"])["version"] == 2
    else:
        with pytest.raises(Conflict):
            client.promote("gated", "production", 2, evaluation["id"])
        client.gate("gated", "production", False)
        client.promote("gated", "production", 2)
    assert client.rollback("gated", "production")["version"] == 1
    moves = client.alias_history("gated", "production")
    assert [m["to_version"] for m in moves["moves"]][:3] == [1, 2, 1], moves
