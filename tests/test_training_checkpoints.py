"""Handout §6, ``save_checkpoint`` and ``load_checkpoint``: atomic saves, safe
loads, and runs resumed from a checkpoint bit for bit.

Oracles: the same runs with a plain torch loop in this process, sha256 of
files, and what this process observes from outside the implementation's
process: files left after this side killed it mid-save, a folder a trapped
file would create. Seeds the implementation's process must not be able to
guess (it is only told what it needs) come from ``secrets`` and are printed
on failure.
"""

from __future__ import annotations

import hashlib
import os
import secrets

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import static
from tests.harness import contents_change
from tests.scenarios import checkpoints as scenarios
from tests.strategies import seeds
from tests.training_checks import assert_losses_close, check_by_keyword, resumed_run

# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("kind", ["mlp", "stack"])
def test_resumed_run_equals_the_uninterrupted_run_bit_for_bit(impl, kind, tmp_path):
    seed = secrets.randbelow(2**31)
    whole, resumed = resumed_run(impl, tmp_path, kind, dim=8, num_layers=2, batch=4, total=10, split=4, seed=seed)
    expected = scenarios.torch_run(kind, dim=8, num_layers=2, batch=4, steps=10, seed=seed)
    assert_losses_close(whole["losses"], expected, 1e-5, 1e-7, f"the uninterrupted run (seed {seed})")
    a, b = whole["losses"], resumed["losses"]
    assert len(a) == len(b) == 10, f"expected 10 losses each, got {len(a)} and {len(b)}"
    diverged = [i for i, (u, v) in enumerate(zip(a, b, strict=True)) if u != v]
    assert not diverged, (
        f"resuming at step 4 in a new process must reproduce the uninterrupted run exactly (model, optimizer "
        f"state and the torch/NumPy/random RNG states all restored from the file); losses differ from step "
        f"{diverged[0]} (seed {seed}):\nuninterrupted {a}\nresumed       {b}"
    )
    for i, (u, v) in enumerate(zip(whole["params"], resumed["params"], strict=True)):
        assert torch.equal(u, v), f"parameter {i} differs after the resumed run (max diff {(u - v).abs().max()})"


def test_checkpoint_round_trip_restores_everything(impl):
    got = impl.scenario(scenarios.checkpoint_round_trip, seed=5)
    assert got["iteration"] == 41, f"load_checkpoint should return 41, got {got['iteration']!r}"
    assert got["extra"] == {"note": "hello", "lr": 0.5, "ids": [1, 2]}, f"extras read back: {got['extra']!r}"
    for i, (a, b) in enumerate(zip(got["params"], got["loaded_params"], strict=True)):
        assert torch.equal(a, b), f"parameter {i} was not restored"
    assert len(got["loaded_opt_state"]) == len(got["opt_state"]) > 0, "the optimizer state was not restored"
    for i, (a, b) in enumerate(zip(got["opt_state"], got["loaded_opt_state"], strict=True)):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (
            f"optimizer state of parameter {i} differs after loading: saved {sorted(a)}, loaded {sorted(b)}"
        )
    for rng in ("torch", "numpy", "python"):
        a, b = got["after_save"][rng], got["after_load"][rng]
        same = torch.equal(a, b) if isinstance(a, torch.Tensor) else (a == b).all() if hasattr(a, "all") else a == b
        assert same, f"the {rng} RNG state was not saved/restored: draws after saving {a}, after loading {b}"
    assert got["files"] == ["ckpt.pt"], f"save_checkpoint should leave only its file, found {got['files']}"


#: nn.Linear(2048, 2048): a 16 MiB checkpoint, whose writing lasts many times
#: longer (the reference's: about 0.1 s, flushed and fsynced) than the
#: millisecond between two looks of this side at `path`.
BIG_SAVE = (2048, 2048)


def _sha256(path) -> str | None:
    if not os.path.exists(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _linear_digest(seed, d_in, d_out) -> str:
    torch.manual_seed(seed)
    return scenarios.linear_digest(torch.nn.Linear(d_in, d_out))


def test_a_save_killed_mid_write_leaves_the_previous_checkpoint(impl, tmp_path):
    """A save killed at any moment leaves at `path` a whole checkpoint, the
    previous one or the new one, never a part of one: this side watches
    `path` itself (not the folder, whose other files are the save's business)
    while a new checkpoint is saved over the previous one, and kills the
    saving process the moment the contents at `path` differ from the previous
    checkpoint's; what is there then must load as the complete new
    checkpoint, and must be a new file (written elsewhere, then renamed over
    `path`: a checkpoint rewritten in place passes through partial states,
    whether or not this side caught one)."""
    old_seed, new_seed = secrets.randbelow(2**31), secrets.randbelow(2**31)
    path = tmp_path / "ckpt.pt"
    impl.scenario(scenarios.save_linear, str(path), old_seed, d_in=8, d_out=8, iteration=7)
    assert path.is_file(), "save_checkpoint(path, ...) wrote no file at `path`"
    old, old_inode = path.read_bytes(), path.stat().st_ino
    # Killed the moment the contents at `path` are no longer the previous (small) checkpoint.
    run = impl.interrupted_scenario(scenarios.save_linear, str(path), new_seed, *BIG_SAVE, iteration=99,
                                    kill_when=contents_change(path))
    assert path.exists(), (
        "a save " + ("killed mid-write" if run.killed else "of a new checkpoint") + " left no file at `path`: "
        "write the new checkpoint to a temporary file, flush and fsync it, then os.replace it over `path`")
    untouched = path.read_bytes() == old
    if not run.killed:
        assert not untouched, "save_checkpoint of a 16 MiB checkpoint returned without writing it at `path`"
    if not untouched:
        inode, digest = path.stat().st_ino, _sha256(path)
        try:
            loaded = impl.fresh_scenario(scenarios.load_linear, str(path), *BIG_SAVE)
        except (ValueError, RuntimeError, OSError, EOFError) as e:
            loaded = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        complete = loaded == {"iteration": 99, "digest": _linear_digest(new_seed, *BIG_SAVE)}
        assert complete, (
            f"a save killed mid-write left at `path` something that is neither checkpoint (sha256 "
            f"{str(digest)[:12]}: {loaded.get('error', 'other weights')}): write the new checkpoint to a "
            "temporary file in the same folder, flush and fsync it, then os.replace it over `path`")
        assert inode != old_inode, (
            "the new checkpoint was written into the file at `path` itself (its inode is the previous "
            "checkpoint's), so a crash during the write would have left a partial file there: write it to a "
            "temporary file in the same folder, flush and fsync it, then os.replace it over `path`")
    else:  # killed before the new checkpoint reached `path`: the previous one must still load
        got = impl.fresh_scenario(scenarios.load_linear, str(path), d_in=8, d_out=8)
        expected = {"iteration": 7, "digest": _linear_digest(old_seed, 8, 8)}
        assert got == expected, (
            "the previous checkpoint, untouched on disk, should still load and give iteration 7 and its "
            f"weights: got iteration {got['iteration']!r}" + ("" if got["digest"] == expected["digest"]
                                                              else " and other weights"))
    # And the same save, left alone, does replace the checkpoint.
    impl.scenario(scenarios.save_linear, str(path), new_seed, *BIG_SAVE, iteration=99)
    loaded = impl.fresh_scenario(scenarios.load_linear, str(path), *BIG_SAVE)
    assert loaded == {"iteration": 99, "digest": _linear_digest(new_seed, *BIG_SAVE)}, (
        "a save that was not interrupted should replace the checkpoint at `path` with one that loads back "
        f"(iteration 99 and its weights), got iteration {loaded['iteration']!r}"
    )


@pytest.mark.parametrize("kind", ["truncated", "garbage", "tensor", "dict"])
def test_load_rejects_broken_or_foreign_files(impl, kind):
    with pytest.raises(ValueError):
        impl.scenario(scenarios.load_bad_file, kind)


def test_load_of_a_missing_file_is_file_not_found(impl):
    with pytest.raises(FileNotFoundError):
        impl.scenario(scenarios.load_bad_file, "missing")


def test_load_refuses_files_that_would_run_code(impl, tmp_path):
    # The same call (load_linear, in fresh processes) first loads a checkpoint
    # the implementation saved -- so it does load files -- then a file this
    # side wrote with an object whose unpickling creates a folder; this side
    # looks for the folder.
    seed = secrets.randbelow(2**31)
    good, trapped, marker = tmp_path / "good.pt", tmp_path / "ckpt.pt", tmp_path / "code-ran"
    impl.scenario(scenarios.save_linear, str(good), seed, d_in=8, d_out=8, iteration=3)
    got = impl.fresh_scenario(scenarios.load_linear, str(good), d_in=8, d_out=8)
    assert got == {"iteration": 3, "digest": _linear_digest(seed, 8, 8)}, (
        f"a saved checkpoint should load back (iteration 3 and its weights), got iteration {got['iteration']!r}"
    )
    which = secrets.randbelow(1000)
    scenarios.write_trapped_file(str(trapped), str(marker), which)
    try:
        impl.fresh_scenario(scenarios.load_linear, str(trapped), d_in=8, d_out=8)
        error = None
    except NotImplementedError:
        raise  # an unfilled stub is no answer
    except Exception as e:
        error = type(e).__name__
    assert not os.path.lexists(marker), (
        f"loading a checkpoint ran code stored in the file (it created {marker.name}; trap {which % 5}): "
        "load with torch.load(..., weights_only=True)"
    )
    assert error == "ValueError", f"a file weights_only refuses should raise ValueError, got {error}"


@pytest.mark.parametrize(
    ("iteration", "extra_kind", "error"),
    [(-1, None, ValueError), ("3", None, TypeError), (2.0, None, TypeError), (True, None, TypeError),
     (3, "object", TypeError), (3, "module", TypeError), (3, "list-with-object", TypeError),
     (3, "dict-with-module", TypeError), (3, "nested-object", TypeError), (3, "numpy-float", TypeError),
     (3, "numpy-int-in-a-list", TypeError), (3, "tuple-key", TypeError), (3, "set", TypeError)],
    ids=["negative", "str", "float", "bool", "extra-object", "extra-module", "extra-list-with-object",
         "extra-dict-with-module", "extra-nested-object", "extra-numpy-float", "extra-numpy-int-in-a-list",
         "extra-tuple-key", "extra-set"],
)
def test_save_rejects_bad_input(impl, iteration, extra_kind, error):
    """Bad iterations, and extras that are not plain data at any depth (the
    docstring: tensors, None, exactly bool/int/float/str, lists/tuples/dicts of
    those with str or int keys; a NumPy scalar is none of these), are refused
    when saving, not found out when loading."""
    with pytest.raises(error):
        impl.scenario(scenarios.save_with, iteration, extra_kind)


def test_save_that_fails_leaves_the_folder_as_it_was(impl, tmp_path):
    """A save that raises (here: a state pickle refuses, as a full disk would
    fail it) leaves the previous checkpoint at ``path`` byte for byte and no
    temporary file beside it. Observed from outside, after the call."""
    path = tmp_path / "ckpt.pt"
    impl.scenario(scenarios.save_linear, str(path), seed=1, d_in=4, d_out=4, iteration=2)
    before = path.read_bytes()
    with pytest.raises(Exception) as e:
        impl.scenario(scenarios.save_unsaveable, str(path))
    assert not isinstance(e.value, NotImplementedError), e.value
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"], (
        f"a failed save left {sorted(p.name for p in tmp_path.iterdir())}: remove the temporary file when the "
        "write fails, then re-raise"
    )
    assert path.read_bytes() == before, "a failed save changed the previous checkpoint"


def test_save_checkpoint_fsyncs_its_file(impl, tmp_path):
    """Durability, read from the source (no process can watch another's
    system calls in the grader's sandbox): the atomic save flushes and
    ``os.fsync``s the temporary file before renaming it into place, so a
    function of training.py (or of a module of your package it imports) that
    calls ``os.replace`` calls ``os.fsync`` before it (itself, or through a
    function of the package)."""
    # It saves at all:
    impl.scenario(scenarios.save_linear, str(tmp_path / "ckpt.pt"), seed=0, d_in=2, d_out=2, iteration=1)
    trees = static.package_trees(impl, "training")
    assert "training" in trees, "training.py was not found (or does not parse)"
    assert static.fsyncs_before_renaming(trees), (
        "save_checkpoint must os.fsync the temporary file before os.replace puts it at `path` (the handout's "
        f"atomic save): no os.fsync before an os.replace in {', '.join(f'{m}.py' for m in trees)}"
    )


@pytest.mark.parametrize("change", scenarios.OTHER_MODELS)
def test_load_into_a_model_with_other_keys_is_a_value_error(impl, change):
    """A checkpoint that does not fit the model (a layer more or fewer, other
    names, other shapes, buffers the model lacks) is a ValueError raised
    before anything is loaded: the model's parameters, the optimizer and the
    RNG states are as they were (``load_state_dict`` alone copies the matching
    keys before it raises). Compared with this test's own build of the model."""
    got = impl.scenario(scenarios.load_into_other_model, change)
    assert got["error"] == "ValueError", f"load_checkpoint into a model with a {change} change raised {got['error']}"
    with torch.random.fork_rng():
        want = [p.detach() for p in scenarios.other_model(change).parameters()]
    assert len(got["params"]) == len(want) and all(
        torch.equal(g, w) for g, w in zip(got["params"], want, strict=True)
    ), f"a load that raised ValueError ({change}) still overwrote some of the model's parameters"
    assert got["lrs"] == [0.5], f"a load that raised ValueError ({change}) changed the optimizer: lrs {got['lrs']}"
    assert torch.equal(got["rng"], torch.Generator().manual_seed(scenarios.LOAD_SEED).get_state()), (
        f"a load that raised ValueError ({change}) changed torch's RNG state"
    )


@pytest.mark.parametrize("saved_with_cuda", [False, True], ids=["saved-on-cpu", "saved-with-cuda"])
def test_checkpoint_round_trip_between_cpu_and_cuda_machines(impl, saved_with_cuda):
    """A checkpoint moves between machines (CUDA faked on the CPU, like the CUDA
    RNG test): one written where CUDA is absent loads where it is available,
    and one holding CUDA generator states loads where CUDA is absent. The model
    and the iteration come back."""
    got = impl.scenario(scenarios.checkpoint_across_machines, saved_with_cuda, seed=3)
    where = "saved with CUDA, loaded without" if saved_with_cuda else "saved without CUDA, loaded with it"
    assert got["iteration"] == 9, f"{where}: load_checkpoint returned {got['iteration']!r}, not 9"
    assert got["params_restored"], f"{where}: the parameters were not restored"


def _plain_leaves() -> st.SearchStrategy:
    return (st.none() | st.booleans() | st.integers(-(2**40), 2**40)
            | st.floats(allow_nan=False, width=64) | st.text(max_size=6)
            | st.builds(lambda n, k: torch.arange(n, dtype=torch.float32) * k, st.integers(0, 4), st.integers(-3, 3)))


def _plain_data() -> st.SearchStrategy:
    """What the docstring allows in ``extra``: tensors, numbers, strings, None,
    and lists/tuples/dicts (str keys) of those, nested."""
    return st.recursive(
        _plain_leaves(),
        lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(min_size=1, max_size=4), inner, max_size=3)),
        max_leaves=8,
    )


def _same_data(a, b) -> bool:
    """Equal values; a tuple may come back as a list and the other way round."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_data(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_data(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=10)
@given(extras=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), _plain_data(),
                              min_size=1, max_size=3))
def test_checkpoint_round_trip_of_nested_extras(impl, extras):
    """Every extra the docstring allows, nested lists, tuples and dicts
    included, is read back by ``load_checkpoint(..., extra=...)`` with its
    values and types (a tuple may come back as a list)."""
    got = impl.scenario(scenarios.extras_round_trip, extras)
    assert got["iteration"] == 2
    assert _same_data(got["extra"], extras), f"extras saved {extras!r}, read back {got['extra']!r}"


@given(seed=seeds)
@settings(max_examples=3)
def test_load_checkpoint_returns_an_int(impl, seed):
    got = impl.scenario(scenarios.checkpoint_round_trip, seed % 1000)
    assert type(got["iteration"]) is int, (
        f"load_checkpoint promises an int, got {type(got['iteration']).__name__} {got['iteration']!r}"
    )


@given(seed=st.integers(0, 255))
@settings(max_examples=3)
def test_checkpoint_restores_the_cuda_rng_when_cuda_is_available(impl, seed):
    """CPU stand-in for the GPU check below: with ``torch.cuda`` faking one
    device (inside the scenario), ``save_checkpoint`` saves the CUDA generator
    state and ``load_checkpoint`` sets it back (``torch.cuda.get_rng_state[_all]``
    / ``set_rng_state[_all]``)."""
    got = impl.scenario(scenarios.checkpoint_with_fake_cuda, seed)
    expected = torch.tensor([seed, 7, 7, 7], dtype=torch.uint8)
    assert got["restored"] is not None, (
        "with CUDA available, load_checkpoint never set the CUDA RNG state (torch.cuda.set_rng_state_all)"
    )
    assert torch.equal(got["restored"].to(torch.uint8).flatten(), expected), (
        f"load_checkpoint set the CUDA RNG state to {got['restored']}, not the saved {expected}"
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="not run on a GPU: needs CUDA")
def test_checkpoint_restores_the_cuda_rng(impl):
    got = impl.scenario(scenarios.resume_cuda_draws, seed=11)
    assert torch.equal(got["after_save"], got["after_load"]), (
        "draws from the CUDA generator after load_checkpoint differ from those after save_checkpoint: "
        "save and restore torch.cuda's RNG state too"
    )


def test_save_to_a_bare_file_name_writes_beside_it(impl, tmp_path):
    """"write a temporary file in the same directory": for ``"ckpt.pt"`` that
    is the working directory (``os.path.dirname`` is ""), never the system's
    temp folder, which may be another filesystem (here it does not exist).
    Observed from outside: the folder holds the checkpoint and nothing else."""
    impl.scenario(scenarios.save_to_a_bare_file_name, str(tmp_path), iteration=6)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["ckpt.pt"], f"save_checkpoint('ckpt.pt') from {tmp_path} left {left}, expected ['ckpt.pt']"
    got = impl.scenario(scenarios.load_iteration, str(tmp_path / "ckpt.pt"))
    assert got == 6, f"loading the checkpoint saved as 'ckpt.pt' at iteration 6 returned {got!r}"


@pytest.mark.parametrize("train_mode", [True, False], ids=["train-mode", "eval-mode"])
def test_save_checkpoint_changes_nothing(impl, train_mode):
    """Saving only reads: the model keeps its mode (dropout in training mode
    stays in training mode), and its parameters, the optimizer's state and
    torch's RNG state are as they were."""
    got = impl.scenario(scenarios.modes_after_save, train_mode)
    with torch.random.fork_rng():
        want = scenarios.after_save(*scenarios.stepped_dropout_model(train_mode))
    assert got["modes"] == want["modes"], (
        f"a model in {'training' if train_mode else 'eval'} mode came out of save_checkpoint with modes "
        f"{got['modes']}: saving must not call .eval() or .train()"
    )
    assert len(got["params"]) == len(want["params"]) and all(
        torch.equal(g, w) for g, w in zip(got["params"], want["params"], strict=True)
    ), "save_checkpoint changed the parameters"
    assert len(got["state"]) == len(want["state"]) and all(
        list(g) == list(w) and all(torch.equal(g[k], w[k]) for k in w)
        for g, w in zip(got["state"], want["state"], strict=True)
    ), "save_checkpoint changed the optimizer's state"
    assert torch.equal(got["rng"], want["rng"]), "save_checkpoint changed torch's RNG state"


def test_save_and_load_accept_every_argument_by_keyword(impl):
    """``save_checkpoint(path=, model=, optimizer=, iteration=, **extra)`` then
    ``load_checkpoint(path=, model=, optimizer=, extra=)`` restore what the
    positional calls restore, and return the same iteration and extras."""
    check_by_keyword(impl, "save_checkpoint")
