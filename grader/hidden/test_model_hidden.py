"""Hidden differential checks for handout §3.2: the submission against the
reference on model sizes and seeds the public tests do not use.

Initialisations are random, so the submission's weights are not compared with
the reference's value by value: both must be within ±3 std, and their mean
squares (w / std)² must agree within twice the Bernstein half-width of
tests/test_model.py at delta = 5e-9 (each is within it of the truth but with
probability 5e-9, so a correct submission fails an example with probability
below 1e-8, and the 12 examples below 1.2e-7; the grade profile's
derandomised draws fix the seeds).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind
from tests.model_checks import M2, M4, bernstein_halfwidth
from tests.scenarios import model as scenarios
from tests.strategies import dims, make_tensor, seeds, shapes
from tests.tolerances import assert_close, check_tensor


@pytest.mark.extends("tests/test_model.py::test_xavier_init_std")
@settings(max_examples=12)
@given(d_in=st.sampled_from([3, 10, 100, 300, 1000, 3000]), seed=seeds, data=st.data())
def test_xavier_init_statistics(impl, ref, d_in, seed, data):
    input_kind(d_in=str(d_in), elements="about 2**17 to 2**18")
    d_out = data.draw(st.integers(max(1, 2**17 // d_in), 2**18 // d_in), label="d_out")
    bound = bernstein_halfwidth(d_in * d_out, M4 - M2**2, 9.0 - M2, delta=5e-9)
    mean_squares = {}
    for who, side in (("submission", impl), ("reference", ref)):
        w = check_tensor(side.scenario(scenarios.xavier_from_generator, d_in, d_out, seed), dtype=torch.float32,
                         shape=(d_in, d_out), what=f"{who} xavier_init({d_in}, {d_out})")
        z = w.double() * math.sqrt(d_in)
        assert z.abs().max().item() <= 3 * (1 + 1e-6), f"{who} xavier_init({d_in}, {d_out}) exceeds 3 std"
        mean_squares[who] = (z**2).mean().item()
    diff = abs(mean_squares["submission"] - mean_squares["reference"])
    assert diff <= 2 * bound, (
        f"xavier_init({d_in}, {d_out}): mean (w/std)² {mean_squares['submission']:.4f}, "
        f"the reference's {mean_squares['reference']:.4f} (tolerance {2 * bound:.4f})"
    )


@pytest.mark.extends("tests/test_model.py::test_cruncher_parameters")
@given(dim=dims(64), num_layers=st.integers(0, 12))
def test_cruncher_parameters(impl, ref, dim, num_layers):
    input_kind(dim="up to 64", num_layers=str(num_layers))
    got = impl.scenario(scenarios.cruncher_parameters, dim, num_layers)
    expected = ref.scenario(scenarios.cruncher_parameters, dim, num_layers)
    assert got == expected, f"Cruncher({dim}, {num_layers}) parameters: expected {expected}, got {got}"


@pytest.mark.extends("tests/test_model.py::test_cruncher_forward")
@given(batch=shapes(0, 4, max_side=5), dim=dims(48), num_layers=st.integers(0, 8), seed=seeds)
def test_cruncher_forward(impl, ref, batch, dim, num_layers, seed):
    input_kind(leading_dims=str(len(batch)), dim="up to 48", num_layers=str(num_layers))
    state = {f"layers.{i}.weight": make_tensor((dim, dim), seed=seed + i) / math.sqrt(dim) for i in range(num_layers)}
    state["final.weight"] = make_tensor((dim, 1), seed=seed + num_layers) / math.sqrt(dim)
    x = make_tensor((*batch, dim), seed=seed)
    expected = ref.scenario(scenarios.cruncher_run, dim, num_layers, state, x)
    got = impl.scenario(scenarios.cruncher_run, dim, num_layers, state, x)
    assert_close(got, expected, scale=4 * dim * (num_layers + 1), what=f"Cruncher({dim}, {num_layers})")


@pytest.mark.extends("tests/test_model.py::test_linear_forward_and_gradient")
@given(batch=shapes(0, 4, max_side=5), d_in=dims(96), d_out=dims(96), seed=seeds)
def test_linear_forward(impl, ref, batch, d_in, d_out, seed):
    input_kind(leading_dims=str(len(batch)), sizes="up to 96")
    state = {"weight": make_tensor((d_in, d_out), seed=seed)}
    x = make_tensor((*batch, d_in), seed=seed ^ 1)
    expected = ref.scenario(scenarios.linear_run, d_in, d_out, state, x)
    got = impl.scenario(scenarios.linear_run, d_in, d_out, state, x)
    assert_close(got, expected, scale=4 * d_in, what=f"Linear({d_in}, {d_out})")


@pytest.mark.extends("tests/test_model.py::test_seed_everything_seeds_torch_numpy_and_random")
@given(seed=st.integers(0, 2**32 - 1), dim=dims(16), num_layers=st.integers(0, 4))
def test_seed_everything(impl, ref, seed, dim, num_layers):
    input_kind(seed="up to 2**32 - 1", num_layers=str(num_layers))
    got, expected = impl.scenario(scenarios.seeded_draws, seed), ref.scenario(scenarios.seeded_draws, seed)
    assert torch.equal(got["torch"], expected["torch"]), f"seed_everything({seed}): torch draws differ"
    assert (got["numpy"] == expected["numpy"]).all(), f"seed_everything({seed}): NumPy draws differ"
    assert got["random"] == expected["random"], f"seed_everything({seed}): random draws differ"
    a = impl.scenario(scenarios.seeded_cruncher, dim, num_layers, seed)
    b = impl.scenario(scenarios.seeded_cruncher, dim, num_layers, seed)
    assert all(torch.equal(a[k], b[k]) for k in a), f"seed_everything({seed}) then Cruncher is not reproducible"
