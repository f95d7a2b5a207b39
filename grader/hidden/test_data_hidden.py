"""Hidden differential checks for handout §5: the submission against the
reference on inputs the public tests do not use (long data, large batches and
contexts, every integer token dtype, other seeds, bigger memmaps, and the
error class of many bad calls). Each names the public test whose property it
extends; the same-seed batches use the public test's oracle (the stated
torch.randint draw), not the reference."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.hidden.conftest import input_kind
from tests.data_checks import assert_rows_are_windows_of, expected_batch, write_random_tokens
from tests.scenarios import data as scenarios
from tests.strategies import seeds
from tests.tolerances import check_tensor

TOKEN_DTYPES = ("uint8", "uint16", "int16", "int32", "uint32", "int64")


def _tokens(n: int, dtype: str, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), size=n, endpoint=True, dtype=np.int64).astype(
        dtype
    )


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except NotImplementedError:
        raise
    except Exception as e:  # only the class is compared
        return "raises", type(e).__name__


@pytest.mark.extends("tests/test_data.py::test_a_seed_gives_the_batch_of_the_stated_draw")
@given(
    n_extra=st.integers(0, 4000),
    context_length=st.integers(1, 300),
    batch_size=st.integers(1, 64),
    dtype=st.sampled_from(TOKEN_DTYPES),
    seed=seeds,
)
def test_batches_equal_the_stated_draw_for_the_same_seed(impl, n_extra, context_length, batch_size, dtype, seed):
    """The contract fixes how starts are drawn (torch.randint over the valid
    starts with the given generator), so a seed gives one batch. ``n_extra=0``
    leaves one token too few: a ValueError, as the docstring says."""
    n = context_length + n_extra
    input_kind(token_dtype=dtype, tokens="up to 4300", context_length="up to 300", batch_size="up to 64",
               too_short="yes" if n_extra == 0 else "no")
    tokens = _tokens(n, dtype, seed)
    call = f"get_batch({n} {dtype} tokens, {batch_size}, {context_length}, generator seed {seed})"
    got = _outcome(lambda: impl.scenario(scenarios.batch_with_seed, tokens, batch_size, context_length, seed))
    if n_extra == 0:
        assert got == ("raises", "ValueError"), (
            f"{call}: too few tokens must raise ValueError, got {got[0]} {got[1]!r:.200}"
        )
        return
    assert got[0] == "ok", f"{call}: raised {got[1]}"
    expected = expected_batch(tokens, batch_size, context_length, seed)
    for name, g, e in zip("xy", got[1], expected, strict=True):
        check_tensor(g, dtype=torch.int64, shape=tuple(e.shape), device="cpu", what=f"{call}: {name}")
        assert torch.equal(g, e), (
            f"{call}: {name} differs from the windows at the stated draw's starts "
            f"(first rows {g[:2, :6]} vs {e[:2, :6]})"
        )


@pytest.mark.extends("tests/test_data.py::test_save_tokens_honours_the_dtype")
@given(tokens=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=300), dtype=st.sampled_from(TOKEN_DTYPES))
def test_save_tokens_bytes_and_errors_equal_the_reference(impl, ref, tokens, dtype):
    input_kind(dtype=dtype, tokens="up to 300, values up to 2**31")
    arr = np.array(tokens, dtype=np.int64)
    got = _outcome(lambda: impl.scenario(scenarios.save_and_read_back, arr, dtype))
    expected = _outcome(lambda: ref.scenario(scenarios.save_and_read_back, arr, dtype))
    if expected[0] == "raises":
        assert got == expected, f"save_tokens(..., {dtype}) of values up to {max(tokens)}: expected {expected[1]}"
    else:
        assert got == expected, f"save_tokens(..., {dtype}) wrote other bytes than the reference"


@pytest.mark.extends("tests/test_data.py::test_load_tokens_is_a_read_only_memmap")
@given(raw=st.binary(min_size=0, max_size=64), dtype=st.sampled_from(TOKEN_DTYPES))
def test_load_tokens_equals_the_reference(impl, ref, raw, dtype):
    input_kind(dtype=dtype, file="0 to 64 bytes, not always a whole number of tokens")
    got = _outcome(lambda: impl.scenario(scenarios.load_written, raw, dtype))
    expected = _outcome(lambda: ref.scenario(scenarios.load_written, raw, dtype))
    if expected[0] == "raises":
        assert got == expected, f"load_tokens of {len(raw)} bytes as {dtype}: expected {expected[1]}, got {got}"
        return
    assert got[0] == "ok", f"load_tokens of {len(raw)} bytes as {dtype} raised {got[1]}"
    g, e = got[1], expected[1]
    for key in ("is_memmap", "dtype", "shape", "writeable"):
        assert g[key] == e[key], f"load_tokens of {len(raw)} bytes as {dtype}: {key} {g[key]!r}, expected {e[key]!r}"
    assert np.array_equal(g["values"], e["values"]), f"load_tokens as {dtype}: values differ"


# One bad argument at a time (with several, which error comes first is not part
# of the contract).
BAD_ARGUMENTS = [
    ("tokens", np.arange(0, dtype=np.uint16)),
    ("tokens", np.arange(8, dtype=np.uint16)),
    ("tokens", np.arange(40, dtype=np.float64)),
    ("tokens", np.arange(40, dtype=np.int32).reshape(8, 5)),
    ("batch_size", 0), ("batch_size", -3), ("batch_size", 2.0), ("batch_size", "3"), ("batch_size", None),
    ("context_length", 0), ("context_length", -1), ("context_length", 40), ("context_length", 1.5),
    ("context_length", "8"),
    ("device", "cuda:4096"), ("device", "tpu"), ("device", ""), ("device", 1.0), ("device", None),
]


@pytest.mark.parametrize(("argument", "value"), BAD_ARGUMENTS, ids=[f"{a}={v!r:.20}" for a, v in BAD_ARGUMENTS])
@pytest.mark.extends("tests/test_data.py::test_get_batch_rejects_bad_input")
def test_get_batch_bad_input_raises_like_the_reference(impl, ref, argument, value):
    input_kind(argument=argument, value_type=type(value).__name__)
    args = {"tokens": np.arange(40, dtype=np.uint16), "batch_size": 2, "context_length": 8, "device": "cpu"}
    args[argument] = value
    got = _outcome(lambda: impl.data.get_batch(*args.values()))
    expected = _outcome(lambda: ref.data.get_batch(*args.values()))
    assert expected[0] == "raises", f"the reference accepts {argument}={value!r}"
    assert got == expected, f"get_batch with {argument}={value!r}: the reference raises {expected[1]}, got {got}"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 128 MiB file of random uint16 tokens (a fresh seed per run)."""
    path = tmp_path_factory.mktemp("tokens") / "tokens.bin"
    write_random_tokens(path, 64 << 20, secrets.randbelow(2**31))
    return path


@pytest.mark.parametrize(("batch_size", "context_length"), [(16, 256), (64, 1024)])
@pytest.mark.extends("tests/test_data.py::test_only_the_sampled_windows_are_read")
def test_larger_batches_read_only_their_windows(impl, token_file, batch_size, context_length):
    input_kind(file="128 MiB memmap", batch_size=str(batch_size), context_length=str(context_length))
    (x, y), peak = impl.measured_scenario(scenarios.sample_file, str(token_file), batch_size=batch_size,
                                          context_length=context_length, seed=11)
    check_tensor(x, dtype=torch.int64, shape=(batch_size, context_length), what="x")
    assert_rows_are_windows_of(token_file, x, y, f"a {batch_size}x{context_length} batch")
    file_bytes = os.path.getsize(token_file)
    limit = file_bytes // 4
    assert peak < limit, (
        f"sampling {batch_size}x{context_length} from a {file_bytes >> 20} MiB memmap raised the process's "
        f"resident memory by {peak >> 20} MiB at its peak (limit {limit >> 20} MiB)"
    )
