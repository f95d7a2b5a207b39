"""Handout §3.2: parameters, Xavier initialisation, a deep linear model, seeding.

Oracles: matrix products computed here from the weights a scenario returns,
scipy's truncated normal, and torch/NumPy/``random`` seeded directly.

**Statistical tests never flake.** Each one uses fixed seeds, so a given
implementation always gets the same verdict, and its acceptance bounds come
from tail inequalities that hold at every sample size (no normal
approximation) or, for the Kolmogorov-Smirnov test, from the exact
distribution of its statistic. Each check wrongly fails a correct
implementation with probability below ``DELTA`` = 5e-8; the file makes 12 such
checks (two per std test, one per truncation test, the KS test, two for the
variance through a layer), so a correct implementation fails any of them with
probability below 6e-7.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tests.model_checks import DELTA, M2, M4, TRUNCATED, bernstein_halfwidth
from tests.scenarios import model as scenarios
from tests.strategies import dims, make_tensor, seeds, shapes
from tests.tolerances import assert_close, check_tensor


def _w_over_std(weight: torch.Tensor, d_in: int) -> np.ndarray:
    return (weight.double() * math.sqrt(d_in)).numpy().ravel()


# ------------------------------------------------------------------- xavier_init

# (d_in, d_out, seed), 2**19 draws each: d_in != d_out, so 1/sqrt(d_out) is a
# different std, and d_in > 9, so ±3 in absolute terms is wider than ±3 std.
BIG = [(1024, 512, 0), (2048, 256, 1), (64, 8192, 2)]
_big_draws: dict[tuple[str, int, int, int], np.ndarray] = {}


def _big_draw(impl, d_in: int, d_out: int, seed: int) -> np.ndarray:
    """w / std of one large xavier_init draw, shared by the tests of BIG (only
    successful draws are kept, so a stub fails every test that needs one)."""
    key = (impl.name, d_in, d_out, seed)
    if key not in _big_draws:
        w = impl.scenario(scenarios.xavier_from_generator, d_in, d_out, seed)
        check_tensor(w, dtype=torch.float32, shape=(d_in, d_out), what=f"xavier_init({d_in}, {d_out})")
        _big_draws[key] = _w_over_std(w, d_in)
    return _big_draws[key]


@given(d_in=dims(64), d_out=dims(64), seed=seeds)
def test_xavier_init_shape_dtype_and_bounds(impl, d_in, d_out, seed):
    w = impl.scenario(scenarios.xavier_from_generator, d_in, d_out, seed)
    check_tensor(w, dtype=torch.float32, shape=(d_in, d_out), device="cpu", what=f"xavier_init({d_in}, {d_out})")
    bound = 3 / math.sqrt(d_in)
    # A property of every draw, not a statistic: cannot fail by chance.
    assert w.abs().max().item() <= bound * (1 + 1e-6), (
        f"xavier_init({d_in}, {d_out}): every value must lie within ±3 std = ±{bound:.4g}, "
        f"got {w.abs().max().item():.4g}"
    )


@pytest.mark.parametrize(("d_in", "d_out", "seed"), BIG)
def test_xavier_init_std(impl, d_in, d_out, seed):
    z = _big_draw(impl, d_in, d_out, seed)
    n = z.size
    # w / std lies in [-3, 3] with variance M2; (w / std)² in [0, 9], variance M4 - M2².
    mean_tol = bernstein_halfwidth(n, M2, 3.0)
    assert abs(z.mean()) <= mean_tol, (
        f"xavier_init({d_in}, {d_out}): mean/std should be 0 ± {mean_tol:.2g}, got {z.mean():.4g}"
    )
    var_tol = bernstein_halfwidth(n, M4 - M2**2, 9.0 - M2)
    got_std = math.sqrt((z**2).mean()) / math.sqrt(d_in)
    assert abs((z**2).mean() - M2) <= var_tol, (
        f"xavier_init({d_in}, {d_out}): std should be {math.sqrt(M2):.4f}/sqrt(d_in) = {math.sqrt(M2 / d_in):.5g} "
        f"(std 1/sqrt(d_in) before truncating at ±3 std; relative tolerance {var_tol / M2 / 2:.1%}), got {got_std:.5g}"
    )


@pytest.mark.parametrize(("d_in", "d_out", "seed"), BIG)
def test_xavier_init_is_truncated_at_3_std(impl, d_in, d_out, seed):
    z = _big_draw(impl, d_in, d_out, seed)
    top = np.abs(z).max()
    assert top <= 3 * (1 + 1e-6), f"xavier_init({d_in}, {d_out}): |w| reaches {top:.3f} std; truncate at 3 std"
    # Values come close to the bound: each draw lands beyond 2.9 std with
    # probability p, so none of n does with probability (1 - p)^n < DELTA.
    p = 2 * TRUNCATED.sf(2.9)
    assert (1 - p) ** z.size < DELTA
    assert top >= 2.9, f"xavier_init({d_in}, {d_out}): no value beyond 2.9 std among {z.size}: truncated too tightly?"


def test_xavier_init_follows_the_truncated_normal(impl):
    """Kolmogorov-Smirnov test of w / std against the normal truncated at ±3."""
    z = _big_draw(impl, *BIG[0])[: 2**18]  # a quarter million draws are plenty
    result = stats.kstest(z, TRUNCATED.cdf)
    assert result.pvalue >= DELTA, (
        f"xavier_init{BIG[0][:2]} / std does not follow a normal truncated at ±3: "
        f"KS statistic {result.statistic:.4f}, p = {result.pvalue:.2g}"
    )


def test_xavier_init_draws_only_from_its_generator(impl):
    """Every draw comes from ``generator``, the redraws of out-of-range values
    included (64 x 64 normal draws hold about 11 beyond 3 std: a redraw from
    torch's global generator shows, as other weights under another global seed
    and as a global state that moved)."""
    runs = impl.scenario(scenarios.xavier_under_global_seeds, d_in=64, d_out=64, seed=7, global_seeds=[0, 1])
    assert torch.equal(runs[0]["weight"], runs[1]["weight"]), (
        "xavier_init(64, 64, generator) changed with torch's global seed: draw from the generator only "
        "(redraws of values beyond 3 std included)"
    )
    for run in runs:
        assert torch.equal(run["global_before"], run["global_after"]), (
            "xavier_init(64, 64, generator) advanced torch's global generator: draw only from the generator"
        )
    again = impl.scenario(scenarios.xavier_from_generator, d_in=64, d_out=64, seed=7)
    other = impl.scenario(scenarios.xavier_from_generator, d_in=64, d_out=64, seed=8)
    assert torch.equal(again, runs[0]["weight"]), "xavier_init: the same generator seed gave different weights"
    assert not torch.equal(other, again), "xavier_init: generator seeds 7 and 8 gave the same weights"


def test_xavier_init_without_generator_uses_the_global_one(impl):
    a = impl.scenario(scenarios.xavier_from_global, d_in=16, d_out=8, global_seed=5)
    b = impl.scenario(scenarios.xavier_from_global, d_in=16, d_out=8, global_seed=5)
    c = impl.scenario(scenarios.xavier_from_global, d_in=16, d_out=8, global_seed=6)
    assert torch.equal(a, b), "xavier_init(16, 8) after torch.manual_seed(5) twice gave different weights"
    assert not torch.equal(a, c), "xavier_init(16, 8) gave the same weights after torch.manual_seed(5) and (6)"


@pytest.mark.parametrize("global_seed", [0, 5, 2**31 - 1])
def test_xavier_init_without_generator_advances_the_global_one(impl, global_seed):
    """The docstring: "else from torch's global generator, which each call
    advances: two calls after one ``torch.manual_seed`` give different
    weights". (A generator of its own seeded from ``torch.initial_seed()``
    would give the same weights at every call.)"""
    got = impl.scenario(scenarios.xavier_twice_from_global, d_in=16, d_out=8, global_seed=global_seed)
    first, second = got["weights"]
    for i, w in enumerate((first, second)):
        check_tensor(w, dtype=torch.float32, shape=(16, 8), what=f"xavier_init(16, 8) call {i + 1}")
    assert not torch.equal(first, second), (
        f"after torch.manual_seed({global_seed}), two calls of xavier_init(16, 8) without a generator gave the "
        "same weights: expected different ones, drawn one after the other from torch's global generator"
    )
    for i in range(2):
        assert not torch.equal(got["states"][i], got["states"][i + 1]), (
            f"after torch.manual_seed({global_seed}), xavier_init(16, 8) call {i + 1} without a generator left "
            "torch's global RNG state (torch.get_rng_state()) unchanged: expected it to draw from it, advancing it"
        )


# ------------------------------------------------------------------------ Linear


@given(d_in=dims(16), d_out=dims(16))
def test_linear_has_one_weight(impl, d_in, d_out):
    got = impl.scenario(scenarios.linear_parameters, d_in, d_out)
    expected = [("weight", (d_in, d_out), torch.float32, True)]
    assert got == expected, f"Linear({d_in}, {d_out}).named_parameters(): expected {expected}, got {got}"


@given(batch=shapes(0, 3, max_side=4), d_in=dims(8), d_out=dims(8), seed=seeds)
def test_linear_forward_and_gradient(impl, batch, d_in, d_out, seed):
    x = make_tensor((*batch, d_in), seed=seed)
    got = impl.scenario(scenarios.linear_forward_backward, d_in, d_out, x, seed)
    w = check_tensor(got["weight"], dtype=torch.float32, shape=(d_in, d_out), what="Linear.weight")
    assert_close(got["out"], x @ w, scale=d_in, what=f"Linear({d_in}, {d_out})(x {tuple(x.shape)})")
    # d(sum(x @ w)) / dw[i, j] = sum over rows of x[..., i]
    expected_grad = x.reshape(-1, d_in).sum(0)[:, None].expand(d_in, d_out)
    assert got["grad"] is not None, "Linear.weight got no gradient: is it an nn.Parameter used in forward?"
    assert_close(got["grad"], expected_grad, scale=max(1, x.numel()), what="Linear.weight.grad of out.sum()")


def test_linear_is_initialised_with_xavier_init(impl):
    state = impl.scenario(scenarios.linear_weight_from_generator, d_in=32, d_out=16, seed=11)
    w = impl.scenario(scenarios.xavier_from_generator, d_in=32, d_out=16, seed=11)
    assert list(state) == ["weight"], f"Linear state dict: expected ['weight'], got {list(state)}"
    assert torch.equal(state["weight"], w), "Linear(32, 16, generator) should hold xavier_init(32, 16, generator)"


def test_linear_keeps_the_variance(impl):
    """Unit-variance inputs give outputs of variance M2 ≈ 0.973 (1 before truncation).

    Given the weight W, the mean of out² is a weighted sum of independent χ²
    variables around ||W||²_F / d_out (Laurent & Massart's bound), and
    ||W||²_F / d_out = mean((w / std)²) is within Bernstein's bound of M2.
    """
    d_in, d_out, rows = 512, 128, 1024
    x = make_tensor((rows, d_in), seed=12)
    got = impl.scenario(scenarios.linear_forward_backward, d_in=d_in, d_out=d_out, x=x, seed=13)
    w = check_tensor(got["weight"], dtype=torch.float32, shape=(d_in, d_out), what="Linear.weight").double()
    out = check_tensor(got["out"], shape=(rows, d_out), what="Linear output").double()
    variance = (out**2).mean().item()
    gram = w.T @ w
    eig_max = torch.linalg.eigvalsh(gram).max().item()
    u = math.log(2 / DELTA)
    chi2_tol = (2 * math.sqrt(rows * u) * torch.linalg.matrix_norm(gram).item() + 2 * eig_max * u) / (rows * d_out)
    weight_tol = bernstein_halfwidth(d_in * d_out, M4 - M2**2, 9.0 - M2)
    tol = chi2_tol + weight_tol
    assert abs(variance - M2) <= tol, (
        f"Linear({d_in}, {d_out}) on unit-variance inputs: output variance should be {M2:.3f} ± {tol:.3f}, "
        f"got {variance:.4f}"
    )


# ---------------------------------------------------------------------- Cruncher


@given(dim=dims(8), num_layers=st.integers(0, 4))
def test_cruncher_parameters(impl, dim, num_layers):
    got = impl.scenario(scenarios.cruncher_parameters, dim, num_layers)
    expected = [(f"layers.{i}.weight", (dim, dim), torch.float32, True) for i in range(num_layers)]
    expected.append(("final.weight", (dim, 1), torch.float32, True))
    assert got == expected, f"Cruncher({dim}, {num_layers}).named_parameters(): expected {expected}, got {got}"
    count = sum(math.prod(shape) for _, shape, _, _ in got)
    assert count == num_layers * dim * dim + dim, f"Cruncher({dim}, {num_layers}): {count} parameters"


@given(batch=shapes(0, 2, max_side=4), dim=dims(6), num_layers=st.integers(0, 3), seed=seeds)
def test_cruncher_forward(impl, batch, dim, num_layers, seed):
    state = {f"layers.{i}.weight": make_tensor((dim, dim), seed=seed + i) / math.sqrt(dim) for i in range(num_layers)}
    state["final.weight"] = make_tensor((dim, 1), seed=seed + num_layers)
    x = make_tensor((*batch, dim), seed=seed ^ 1)
    expected = x
    for i in range(num_layers):
        expected = expected @ state[f"layers.{i}.weight"]
    expected = (expected @ state["final.weight"])[..., 0]
    got = impl.scenario(scenarios.cruncher_run, dim, num_layers, state, x)
    what = f"Cruncher({dim}, {num_layers})(x {tuple(x.shape)})"
    assert_close(got, expected, scale=4 * dim * (num_layers + 1), what=what)


def test_cruncher_keeps_a_batch_of_one(impl):
    state = {"layers.0.weight": torch.tensor([[2.0]]), "final.weight": torch.tensor([[3.0]])}
    got = impl.scenario(scenarios.cruncher_run, dim=1, num_layers=1, state=state, x=torch.tensor([[1.5]]))
    assert_close(got, torch.tensor([9.0]), what="Cruncher(1, 1)(x of shape (1, 1)): squeeze only the last dimension")


def test_cruncher_layers_draw_from_the_generator_in_order(impl):
    got = impl.scenario(scenarios.cruncher_from_generator, dim=8, num_layers=3, seed=21)
    names = [*(f"layers.{i}.weight" for i in range(3)), "final.weight"]
    assert list(got["state"]) == names, f"Cruncher(8, 3) state dict keys: expected {names}, got {list(got['state'])}"
    for name, draw in zip(names, got["xavier_draws"], strict=True):
        assert torch.equal(got["state"][name], draw), (
            f"Cruncher(8, 3, generator): {name} is not the next xavier_init draw from the generator"
        )


@pytest.mark.parametrize(("dim", "num_layers"), [(8, 3), (1, 2)])
def test_cruncher_layers_differ_without_a_generator(impl, dim, num_layers):
    """The handout: "without one it draws from the global generator, which each
    call advances: two calls after one ``torch.manual_seed`` give different
    weights, and so do the layers of one ``Cruncher``"; the global state
    advances."""
    got = impl.scenario(scenarios.cruncher_from_global, dim=dim, num_layers=num_layers, global_seed=3)
    names = [f"layers.{i}.weight" for i in range(num_layers)]
    assert all(n in got["state"] for n in names), (
        f"Cruncher({dim}, {num_layers}) state dict keys: expected {names} and final.weight, got {list(got['state'])}"
    )
    for i in range(num_layers):
        for j in range(i + 1, num_layers):
            assert not torch.equal(got["state"][names[i]], got["state"][names[j]]), (
                f"Cruncher({dim}, {num_layers}) built after torch.manual_seed(3) without a generator: {names[i]} and "
                f"{names[j]} are equal ({got['state'][names[i]].flatten()[:4].tolist()}...): expected different "
                "draws, one after the other, from torch's global generator"
            )
    assert not torch.equal(got["before"], got["after"]), (
        f"Cruncher({dim}, {num_layers}) without a generator left torch's global RNG state unchanged: expected its "
        "layers to draw from torch's global generator"
    )


def test_cruncher_is_reproducible_after_seed_everything(impl):
    a = impl.scenario(scenarios.seeded_cruncher, dim=6, num_layers=2, seed=1234)
    b = impl.scenario(scenarios.seeded_cruncher, dim=6, num_layers=2, seed=1234)
    c = impl.scenario(scenarios.seeded_cruncher, dim=6, num_layers=2, seed=1235)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (
        "seed_everything(1234) then Cruncher(6, 2) twice gave different weights"
    )
    assert not all(torch.equal(a[k], c[k]) for k in a), "seeds 1234 and 1235 gave the same Cruncher"


# ---------------------------------------------------------------- seed_everything


@given(seed=st.integers(0, 2**32 - 1))
def test_seed_everything_seeds_torch_numpy_and_random(impl, seed):
    got = impl.scenario(scenarios.seeded_draws, seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    expected_torch, expected_numpy = torch.rand(4), np.random.rand(4)
    expected_random = [random.random() for _ in range(4)]
    call = f"seed_everything({seed})"
    assert torch.equal(got["torch"], expected_torch), f"{call} did not seed torch as torch.manual_seed does"
    assert np.array_equal(got["numpy"], expected_numpy), f"{call} did not seed NumPy as np.random.seed does"
    assert got["random"] == expected_random, f"{call} did not seed random as random.seed does"


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_seed_everything_seeds_cuda_too(impl, seed):
    """CPU stand-in for the GPU check below: ``seed_everything`` seeds torch on
    every device, CUDA included (``torch.manual_seed`` does, through
    ``torch.cuda.manual_seed_all``; here torch.cuda's seeding functions are
    recorders, inside the scenario only)."""
    got = impl.scenario(scenarios.cuda_seeds_after_seed_everything, seed)
    assert seed in got, (
        f"seed_everything({seed}) never seeded CUDA's generators (torch.cuda received {got}): "
        "use torch.manual_seed, which seeds every device"
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="not run on a GPU: needs CUDA")
def test_seed_everything_seeds_the_cuda_generator(impl):
    got = impl.scenario(scenarios.seeded_cuda_draws, seed=1234)
    torch.manual_seed(1234)
    expected = torch.rand(8, device="cuda").cpu()
    assert torch.equal(got, expected), "seed_everything(1234) did not seed the CUDA generator as torch.manual_seed does"


# -------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "error"),
    [((0, 3), ValueError), ((3, 0), ValueError), ((3.0, 3), TypeError), ((3, 3, "seed"), TypeError),
     ((True, 3), TypeError)],  # a bool is not an int here (handout)
    ids=str,
)
def test_xavier_init_rejects_bad_input(impl, args, error):
    with pytest.raises(error):
        impl.model.xavier_init(*args)


@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        ("Linear", [0, 3], ValueError),
        ("Linear", [3, "3"], TypeError),
        ("Cruncher", [0, 2], ValueError),
        ("Cruncher", [4, -1], ValueError),
        ("Cruncher", [4.0, 1], TypeError),
    ],
    ids=str,
)
def test_modules_reject_bad_input(impl, name, args, error):
    with pytest.raises(error):
        impl.scenario(scenarios.construct, name, args)


@pytest.mark.parametrize(("seed", "error"), [(-1, ValueError), (2**32, ValueError), (1.5, TypeError), ("0", TypeError)])
def test_seed_everything_rejects_bad_input(impl, seed, error):
    with pytest.raises(error):
        impl.model.seed_everything(seed)
