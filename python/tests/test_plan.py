"""plan: Appendix A of the paper (depths 4 3 1 0 at B = 8) and agreement with
`fathom plan --json` (importance, water line, depths) digit for digit."""
import numpy as np
import pytest

import fathom

VAR = [1.222, 0.755, 0.127, 0.001]
QUERIES = [[3, 1, 2, 0.1], [1, 2, -1, 0.2]]


def test_appendix_a():
    assert fathom.plan(VAR, QUERIES, 8).tolist() == [4, 3, 1, 0]
    g = fathom.importance(QUERIES, VAR)
    np.testing.assert_allclose(g, [12.22, 3.775, 0.635, 0.00005], rtol=1e-6)
    depths, theta = fathom.water_fill(g, 8)
    assert depths.dtype == np.uint8 and depths.tolist() == [4, 3, 1, 0]
    assert theta == pytest.approx(0.635 / 8, rel=1e-6)  # g_2's second breakpoint
    assert fathom.depth_bits(depths) == 8.75
    assert fathom.water_fill(g, 6)[0].tolist() == [3, 2, 1, 0]
    assert fathom.depths_at(g, 0.1).tolist() == [3, 3, 1, 0]
    bisect, theta_b = fathom.water_fill(g, 8, bisect=True)
    assert bisect.tolist() == [4, 3, 1, 0] and g[2] / 8 < theta_b < g[2] / 8 * (1 + 1e-6)


def _cli_plan(cli, var, queries, *args):
    argv = ["plan", "--var", ",".join(repr(float(v)) for v in var)]
    for q in queries:
        argv += ["--query", ",".join(repr(float(x)) for x in q)]
    return cli.json(*argv, *args)


def test_appendix_a_against_cli(cli):
    out = _cli_plan(cli, VAR, QUERIES, "--budget", 8)
    depths, theta = fathom.water_fill(fathom.importance(QUERIES, VAR), 8)
    assert out["depths"] == [4, 3, 1, 0] == depths.tolist()
    assert out["theta"] == theta


@pytest.mark.parametrize("dim,group,budget,bisect", [(128, 4, 48, False), (128, 8, 64, True), (97, 1, 40, False)])
def test_random_plans_against_cli(cli, dim, group, budget, bisect):
    rng = np.random.default_rng(dim * group + budget)
    var = rng.gamma(0.5, 1.0, dim).astype(np.float32)
    queries = rng.standard_normal((group, dim)).astype(np.float32)
    out = _cli_plan(cli, var, queries, "--budget", budget, *(["--bisect"] if bisect else []))
    g = fathom.importance(queries, var)
    depths, theta = fathom.water_fill(g, budget, bisect=bisect)
    assert out["importance"] == g.tolist()  # printed with %.17g: exact
    assert out["theta"] == theta
    assert out["depths"] == depths.tolist() == fathom.plan(var, queries, budget, bisect=bisect).tolist()
    assert depths.sum() <= budget


def test_greedy_layer_budgets():
    # layer 1's error falls fastest: it gets the spare bits first
    levels = [16, 32, 48]
    err = np.array([[0.30, 0.25, 0.24], [0.50, 0.20, 0.10]])
    assert fathom.greedy_layer_budgets(levels, err, 32).tolist() == [16, 48]
    assert fathom.greedy_layer_budgets(levels, err, 16).tolist() == [16, 16]
