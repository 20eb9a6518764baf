"""The fidelity harness from Python equals `fathom eval --json` on the same
inputs: a capture file (written here from the synthetic generator) and the
synthetic source itself. The CLI prints every number with %.6g, so each
Python float rounded the same way must give exactly the printed number."""
import numpy as np
import pytest

import fathom
from conftest import full_library

pytestmark = full_library

METHODS = "fathom:48,fathom-klt:32,sparq:16,ds:32,loki:16,thumb,landmark,full4,oracle,dense"
FIELDS = ("bits_per_token", "scan_bytes_per_step", "row_bytes_per_step", "rel_error", "rel_error_stderr",
          "selection_ratio")


def assert_same_as_cli(results, cli_methods):
    assert [r.name for r in results] == [m["name"] for m in cli_methods]
    for r, m in zip(results, cli_methods):
        for f in FIELDS:
            assert float(f"{getattr(r, f):.6g}") == float(m[f]), f"{r.name}.{f}: {getattr(r, f)!r} vs {m[f]}"


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("capture") / "smollm2.safetensors"
    fathom.synthetic("smollm2-135m", context=512, positions=6, seed=3).write(path, dtype="bf16")
    return path


def test_capture_both_ways(cli, capture):
    out = cli.json("eval", "--kv", capture, "--methods", METHODS, "--k", 64, "--threads", 2, "--quiet",
                   raw_numbers=True)
    src = fathom.open_capture(capture)
    info = src.info
    assert (int(out["tokens"]), int(out["positions"]), int(out["k"])) == (info.tokens, info.positions, 64)
    calls = []
    results = fathom.evaluate(src, METHODS, k=64, threads=2, progress=lambda done, total: calls.append((done, total)))
    assert_same_as_cli(results, out["methods"])
    assert calls and calls[-1][0] == calls[-1][1]  # the progress reached its total
    by = {r.name: r for r in results}
    assert by["dense"].rel_error == 0 and by["oracle"].rel_error < by["fathom:48"].rel_error < by["thumb"].rel_error * 10
    assert by["sparq:16"].bits_per_token == fathom.method_fixed_bits("sparq:16", info.dim)


def test_synthetic_both_ways_with_calibration(cli):
    args = ("--synthetic", "smollm2-135m", "--context", 384, "--positions", 4, "--seed", 9)
    out = cli.json("eval", *args, "--calib", "synthetic", "--methods", "fathom:40,ds:16,loki:16", "--k", 48,
                   "--layer-budget", "greedy", "--keys", "planes", "--threads", 1, "--quiet", raw_numbers=True)
    src = fathom.synthetic("smollm2-135m", 384, 4, seed=9)
    calib = fathom.synthetic("smollm2-135m", 384, 4, seed=9 + 1000)  # what --calib synthetic opens
    results = fathom.evaluate(src, ["fathom:40", "ds:16", "loki:16"], k=48, calib=calib, layer_budget="greedy",
                              threads=1, planes_as_keys=True)
    assert_same_as_cli(results, out["methods"])


def test_capture_round_trip(tmp_path):
    info = fathom.SourceInfo(model="tiny", layers=2, q_heads=4, kv_heads=2, dim=8, tokens=70, positions=3,
                             first_query=67)
    rng = np.random.default_rng(0)
    layers = [tuple(rng.standard_normal(s).astype(np.float32) for s in
                    [(4, 3, 8), (2, 70, 8), (2, 70, 8)]) for _ in range(2)]
    path = tmp_path / "tiny.safetensors"
    with fathom.CaptureWriter(path, info, dtype="f32") as w:
        w.meta("note", "written from numpy")
        for l, (q, k, v) in enumerate(layers):
            w.layer(l, q, k, v)
    src = fathom.open_capture(path)
    assert src.info == info
    assert src.metadata()["note"] == "written from numpy"
    assert src.dtypes(1) == ("f32", "f32", "f32")
    for l, arrays in enumerate(layers):
        for got, want in zip(src.layer(l), arrays):
            np.testing.assert_array_equal(got, want)
    q, k, v = src.layer(0, q=False, v=False)
    assert q is None and v is None and k.shape == (2, 70, 8)
