"""Every cheating submission in grader/corpus/cheat earns none of the points it
targets, and the grader exits normally with reports of its own."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from grader.corpus import build_cheat
from grader.rubric import load
from grader.sandbox import uidsandbox
from grader.sandbox.isolation import bwrap_usable
from grader.worker.confine import landlock_abi, seccomp_available
from selftest.uidmode import locked_checkout, uid_setup

REPO = Path(__file__).resolve().parent.parent
CHEATS = REPO / "grader" / "corpus" / "cheat"
BWRAP, WHY = bwrap_usable()
SECCOMP = seccomp_available()

# name: (problems it targets, what it needs to be graded safely here, expected statuses)
CASES = {
    "conftest_inside": ("precision", None, "failed"),
    "conftest_beside": ("precision", None, "failed"),
    "patch_allclose": ("precision", None, "failed"),
    "always_equal": ("precision", None, "failed"),
    "tensor_subclass": ("einops_ops", None, "failed"),
    "sys_exit": ("precision", None, "error"),
    "os_exit": ("precision", None, "error"),
    "write_results": ("precision", "bwrap", "failed"),
    "read_reference": ("precision", "bwrap", "failed"),
    "patched_timers": ("precision", None, "failed"),
    "infinite_loop": ("precision", None, "timeout"),
    "memory_bomb": ("precision", None, "failed|timeout"),
    "fork_bomb": ("precision", "seccomp", "failed"),
    "print_flood": ("precision", None, "failed"),
    "syntax_error": ("precision", None, "error"),
    "missing_module": ("precision", None, "error"),
    "hostile_replies": ("precision", None, "error"),
    # On a GPU it fails on speed (benchmarks/gpu.sh grades it there); here it is not run.
    "gpu_hog": ("mfu", None, "failed|timeout" if torch.cuda.is_available() else "not run on a GPU"),
    # Forged in-worker facts: the patched reference delegating every optimizer
    # to torch.optim, plus scenarios replaced to report what a correct module
    # would. It must lose the problem, as the stubs do.
    "forge_delegation": ("optimizers", None, "failed"),
    # Delegation to torch.optim by routes no source reader resolves: the
    # optimizers' worker has torch.optim's algorithms sealed, so they fail as the stubs do.
    "dynamic_delegation": ("optimizers", None, "failed|error"),  # error: its reload is an ImportError
    # torch.optim's optimizers rebuilt from torch's files (sources executed, bytecode unmarshalled), which the
    # in-process seal cannot stop: in bubblewrap its worker reads sealed copies and finds no bytecode.
    "exec_torch_source": ("optimizers", "bwrap", "failed"),
    # A package student/optimizers/ shadowing the stub module the grader would read.
    "package_shadow": ("optimizers", None, "error"),
    "leak_inputs": ("precision", None, "error"),
    "wire_inflate": ("precision", None, "error"),
    "disk_fill": ("precision", "bwrap", "error|timeout"),
    # Its first call may build the whole depth and return before the scratch watch walks: that call fails
    # on its own, and a later one is the one killed.
    "deep_scratch": ("precision", "bwrap", "failed|error|timeout"),
    "escape_codes": ("precision", None, "failed"),
    "hostile_strings": ("precision", None, "failed"),
    "symlink_student": ("precision", None, "error"),
    "symlink_loose": ("precision", None, "error"),
    "memory_hungry": ("precision", None, "failed|timeout"),  # refused allocations take a while on busy cores
    # Without bubblewrap the worker's /tmp and /dev/shm are the host's (README: what rlimits mode cannot do).
    "tmpfs_offload": ("training", "bwrap", "failed"),
    # The same activations in deleted files held open: on disk in the scratch folder, found by no folder walk.
    "deleted_offload": ("training", "bwrap", "failed"),
    "flock_channel": ("precision", None, "failed"),
    "fallocate_fill": ("precision", "bwrap", "error|timeout"),
    "dev_fill": ("precision", "bwrap", "failed"),
    "ptrace_pid1": ("precision", "bwrap", "failed"),
}
#: Cheats that are the reference but for one part, hidden by the attack: they
#: must lose that part's items (named by a public test of each: the item that
#: holds it) and gain nothing else, and whatever they do is never the
#: machine's fault (no grader error, no regrade). name: ({problem: [public
#: tests whose items are lost, or [] for full marks]}, what it needs, "full"
#: when ./lab test leaves it to LAB_FULL_CORPUS=1).
ITEM_CASES: dict[str, tuple[dict[str, list[str]], str | None, bool]] = {
    # Its CPU and memory hidden behind a main thread that ended itself (the process shows as a zombie).
    "thread_after_exit": ({"precision": ["test_bytes_per_element_matches_element_size"],
                           "data": ["test_only_the_sampled_windows_are_read"]}, None, False),
    # A save that makes a marker beside the checkpoint first, then writes `path` in place.
    "save_marker": ({"training": ["test_a_save_killed_mid_write_leaves_the_previous_checkpoint"]}, None, True),
    # An atomic save whose temporary file is one folder up: correct, and no reason for a grader error.
    "temp_above": ({"training": []}, None, True),
    # Numbers and text it controls (exit status, CPU seconds, a malformed reply quoting its inputs).
    "number_channels": ({"precision": ["test_bytes_per_element_matches_element_size"]}, None, False),
    # Paths of the grader's temporary folder in its own exception messages.
    "paths_in_messages": ({"data": ["test_save_tokens_writes_raw_uint16_by_default"]}, None, False),
    # Activations kept in a tmpfs of a user and mount namespace of its own.
    "namespace_offload": ({"training": ["test_checkpointed_forward_holds_fewer_activations"]}, "seccomp", True),
    # Its own priority lowered and its CPU pinned, so that a wait of its own looks like the machine's.
    "scheduler_starved": ({"precision": ["test_bytes_per_element_matches_element_size"]}, "seccomp", False),
    # Activations written over a file an earlier worker made, so the scratch folder does not grow.
    "storage_prefill": ({"training": ["test_checkpointed_forward_holds_fewer_activations"]}, "bwrap", False),
    # Forged in-worker facts: otherwise-correct modules (the patched reference) with one kind of bug, plus
    # the scenarios that would catch it replaced to report what a correct module would.
    # A non-atomic save and a weights_only=False load:
    "forge_checkpoints": ({"training": ["test_a_save_killed_mid_write_leaves_the_previous_checkpoint",
                                        "test_load_refuses_files_that_would_run_code"]}, None, True),
    # get_batch copying the whole memmap, and no activation checkpointing:
    "forge_memory": ({"data": ["test_only_the_sampled_windows_are_read"],
                      "training": ["test_checkpointed_forward_holds_fewer_activations"]}, None, True),
    # A load that does not restore the RNG states:
    "forge_resume": ({"training": ["test_resumed_run_equals_the_uninterrupted_run_bit_for_bit"]}, None, True),
    # Activations parked in kernel memory no meter reads: socket pair queues, detached SysV shared memory.
    "kernel_memory_parking": ({"training": ["test_checkpointed_forward_holds_fewer_activations"]}, "seccomp",
                              False),
    # Its fork server's open-file limit lowered (prlimit64 on its parent), so that the next problem's worker
    # cannot start there: the grader's fault, had it been allowed. views must keep every point.
    "server_limits": ({"precision": ["test_bytes_per_element_matches_element_size",
                                     "test_tensor_bytes_matches_measured_storage"],
                       "views": []}, "seccomp", False),
    # Each function answers right only when a call the sandbox refuses went through (io_uring, a keyring,
    # System V shared memory, a socket pair and a pipe, its own scheduling): it loses what calls them.
    "refused_calls": ({"precision": ["test_bytes_per_element_matches_element_size",
                                     "test_tensor_bytes_matches_measured_storage",
                                     "test_float_format_matches_finfo", "test_underflows_matches_cast",
                                     "test_overflows_matches_cast", "test_worked_examples",
                                     "test_results_have_the_promised_python_types"]}, "seccomp", False),
}
#: The entries of ITEM_CASES graded in both isolations (bubblewrap, and the uid mode a GPU node grades in): all.
ITEM_BOTH_ISOLATIONS = tuple(ITEM_CASES)
#: The entries that lose exactly their targeted items: every other item of their problems keeps its points.
EXACTLY_ITS_ITEMS = ("kernel_memory_parking", "server_limits", "refused_calls")
#: Folders of the corpus that are not one submission (graded by their own tests below).
NOT_SUBMISSIONS = {"bad_archives"}


def test_every_cheat_has_a_case():
    assert sorted(p.name for p in CHEATS.iterdir() if p.is_dir() and p.name not in NOT_SUBMISSIONS) == \
        sorted([*CASES, *ITEM_CASES])
    assert not set(CASES) & set(ITEM_CASES)


def _grade(submission: Path, problems: str, out_dir: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict,
                                                                                  dict]:
    """Grade with the grader's temporary folders in ``out_dir / "tmp"`` (to see what it leaves)."""
    out, gs = out_dir / "result.json", out_dir / "gradescope.json"
    (out_dir / "tmp").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(submission), "--problems", problems, "--profile", "dev",
         "--json", str(out), "--gradescope", str(gs), "--cpu-budget", "60", "--memory-limit", "1.5", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(out_dir / "tmp")},
    )
    assert proc.returncode == 0, f"the grader failed on {submission}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(out.read_text()), json.loads(gs.read_text())


@pytest.mark.parametrize("archive", sorted(p.name for p in (CHEATS / "bad_archives").glob("*.zip")))
def test_bad_archive_is_an_error_result(archive, tmp_path):
    """A corrupt member, a file where student/ goes, a 2100-level path: an error
    result with a clear message, exit 0, no temporary folder left behind."""
    _proc, result, gradescope = _grade(CHEATS / "bad_archives" / archive, "precision", tmp_path)
    assert result["score"] == 0 and gradescope["score"] == 0
    assert result["problems"][0]["status"] == "error" and "not graded" in result["problems"][0]["output"]
    assert archive in result["error"] and ("could not be unpacked" in result["error"] or "deep" in result["error"]), \
        result["error"]
    assert not list((tmp_path / "tmp").iterdir()), "a temporary folder was left behind"


#: The cheats graded in each filesystem isolation: bubblewrap and the worker as an unprivileged uid on a locked
#: checkout (grader/sandbox/uidsandbox.py). All but gpu_hog, whose attack needs a GPU (selftest/test_mfu_isolation.py
#: runs it in a sandboxed worker against a stand-in device clock).
BOTH_ISOLATIONS = tuple(n for n in CASES if n != "gpu_hog")
#: The uid-mode cases that rest on Landlock (the host's shared memory and torch.optim's files are open to the
#: worker's uid without it).
NEEDS_LANDLOCK = ("exec_torch_source", "dev_fill")


def _cases() -> list:
    params = []
    for n in sorted(CASES):
        marks = [pytest.mark.full] if n.startswith("forge_") else []
        for mode in ("bwrap", "uid") if n in BOTH_ISOLATIONS else ("auto",):
            # ./lab test samples uid mode: the reference read through the locked checkout, and the cases whose
            # defence there is Landlock's own; the others' uid runs (the same filter, limits and meters as in
            # bwrap, the uid's own files counted) are left to LAB_FULL_CORPUS=1 where bubblewrap grades them (on
            # a machine without it, uid mode is the isolation: all of them run).
            sampled = [pytest.mark.full] if mode == "uid" and BWRAP and n not in (*NEEDS_LANDLOCK, "read_reference") \
                else []
            params.append(pytest.param(n, mode, marks=marks + sampled, id=n if mode == "auto" else f"{n}-{mode}"))
    return params


@pytest.mark.parametrize(("name", "isolation"), _cases())
def test_cheat_gains_nothing(name, isolation, tmp_path):
    problems, needs, status = CASES[name]
    python, sandbox, guard = sys.executable, [], contextlib.nullcontext()
    if isolation == "uid":
        uid_python, why = uid_setup(uidsandbox.worker_ids()[0], alone=name == "read_reference")
        if uid_python is None:
            pytest.skip(f"grading {name} in uid mode: {why}")
        if name in NEEDS_LANDLOCK and not landlock_abi():
            pytest.skip(f"grading {name} in uid mode rests on Landlock, which this kernel lacks")
        python, sandbox, guard = uid_python, ["--sandbox", "uid"], locked_checkout()
    elif (needs == "bwrap" or isolation == "bwrap") and not BWRAP:
        pytest.skip(f"grading {name} in bubblewrap: {WHY}")
    elif isolation == "bwrap":
        sandbox = ["--sandbox", "bwrap"]
    if needs == "seccomp" and not SECCOMP:
        pytest.skip(f"grading {name} safely needs the seccomp filter (Linux x86_64/aarch64)")
    out, gs, junit = tmp_path / "result.json", tmp_path / "gradescope.json", tmp_path / "junit.xml"
    folder = build_cheat(name, tmp_path / "built")
    forged = name.startswith("forge_")  # whole problems of real work: the limits of a real submission
    call_cpu = "4" if name == "infinite_loop" else "60" if forged or name == "disk_fill" else "10"
    with guard:
        proc = subprocess.run(
            [python, "-m", "grader", str(folder), "--problems", problems, "--profile", "dev",
             "--json", str(out), "--gradescope", str(gs), "--junit", str(junit), "--call-cpu", call_cpu,
             "--cpu-budget", "600" if forged else "60", "--memory-limit", "8" if forged else "1.5", *sandbox],
            cwd=REPO, capture_output=True, text=True, timeout=1800 if forged else 600,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert proc.returncode == 0, f"the grader failed on {name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    result, gradescope = json.loads(out.read_text()), json.loads(gs.read_text())
    assert result["submission"] == str(folder), "the results file is not the grader's"
    if isolation != "auto":
        assert result["sandbox"].startswith("bubblewrap" if isolation == "bwrap" else "unprivileged uid "), \
            result["sandbox"]
    assert result["score"] == 0 and gradescope["score"] == 0, f"{name} earned points: {result}"
    by = {p["name"]: p for p in result["problems"]}
    for p in problems.split(","):
        assert by[p]["score"] == 0 and by[p]["status"] in status.split("|"), (by[p]["status"], by[p]["output"][:2000])
    assert "score 0/" in proc.stdout
    if name == "print_flood":
        assert len(by["precision"]["log"]) < (64 << 10) + 200 and "dropped" in by["precision"]["log"]
    if name == "write_results":
        assert not list(REPO.glob("**/results.json")), "a forged results file appeared in the repository"
    if name == "leak_inputs":  # what it printed stays in the instructors' log
        assert "LEAKED" in by["precision"]["log"]
        visible = json.dumps(gradescope) + by["precision"]["output"] + json.dumps(by["precision"]["checks"])
        assert "LEAKED" not in visible and "LEAKED" not in proc.stdout
    if name == "escape_codes":
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", proc.stdout + json.dumps(
            gradescope, ensure_ascii=False) + out.read_text()), "control characters reached an output"
    if name == "hostile_strings":  # every report written, readable by a strict parser, and honest
        suite = ET.parse(junit).getroot()  # (raises on a code point XML refuses)
        assert suite.get("failures") == str(len(by["precision"]["items"])), ET.tostring(suite)[:2000]
        everything = proc.stdout + json.dumps(gradescope, ensure_ascii=False) + out.read_text() + junit.read_text()
        everything.encode("utf-8")  # no lone surrogate left (it cannot be encoded)
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\ufdd0-\ufdef\ufffe\uffff\U0010fffe\U0010ffff]",
                             everything), "a code point XML or a terminal cannot take reached a report"
        assert "lone \ufffd surrogate" in by["precision"]["output"]  # replaced, not silently lost
        assert "The autograder itself failed" not in json.dumps(gradescope), gradescope
        assert "Traceback" not in proc.stderr and "could not write" not in proc.stderr, proc.stderr
    if name == "package_shadow":  # refused at staging, saying why
        assert "student/optimizers/ is a folder" in result["error"], result["error"]
    if name == "dynamic_delegation":  # every optimizer failed by what it did: torch.optim's parts refused to run
        assert "is not available to submissions" in json.dumps(by["optimizers"]["checks"]), by["optimizers"]["output"]
    if name == "exec_torch_source":  # what it read was the sandbox's sealed copy of torch's file, or nothing
        assert ("Permission denied" if isolation == "uid" else "holds a sealed copy of torch/optim/") \
            in json.dumps(by["optimizers"]["checks"]), by["optimizers"]["output"]
        if isolation == "uid":
            assert "the optimizers' worker cannot read torch.optim's files" in result["sandbox"], result["sandbox"]
    if name == "flock_channel":  # what a worker with hidden inputs locked never reaches a student
        public = [c["message"] for c in by["precision"]["checks"] if c["test"].startswith("tests/")]
        assert "LEAKED" not in json.dumps(gradescope) + proc.stdout + json.dumps(public)
    if name == "dev_fill":  # nothing reached the host's shared memory
        assert not list(Path("/dev/shm").glob("fill-*")), "the worker wrote into the host's /dev/shm"
    if name == "ptrace_pid1":  # nothing else lives in the worker's PID namespace
        assert "ATTACHED" not in by["precision"]["log"], by["precision"]["log"][:2000]
    if name in ("disk_fill", "deep_scratch", "fallocate_fill"):
        assert "killed by the grader: the scratch folder" in by["precision"]["output"] or \
            by["precision"]["status"] == "timeout", by["precision"]["output"]


def _visible(proc: subprocess.CompletedProcess, gradescope: dict, junit: Path) -> str:
    """Everything a student reads of a grade: the table, Gradescope's results, the JUnit XML."""
    return proc.stdout + json.dumps(gradescope) + junit.read_text()


def _item_cases() -> list:
    params = []
    for n, (_, _, full) in sorted(ITEM_CASES.items()):
        for mode in ("bwrap", "uid") if n in ITEM_BOTH_ISOLATIONS else ("auto",):
            # ./lab test samples uid mode: the memory parking (its meters differ by mode); the others' refusals
            # are the filter's in both modes, probed call by call in selftest/test_sandbox_refusals.py (and where
            # bubblewrap is unusable, uid mode is the isolation: all of them run).
            sampled = mode == "uid" and BWRAP and n != "kernel_memory_parking"
            params.append(pytest.param(n, mode, marks=[pytest.mark.full] if full or sampled else [],
                                       id=n if mode == "auto" else f"{n}-{mode}"))
    return params


@pytest.mark.parametrize(("name", "isolation"), _item_cases())
def test_cheat_loses_what_it_targets_and_no_more_is_the_machines(name, isolation, tmp_path):
    targets, needs, _ = ITEM_CASES[name]
    python, sandbox, guard = sys.executable, [], contextlib.nullcontext()
    if isolation == "uid":
        uid_python, why = uid_setup(uidsandbox.worker_ids()[0])
        if uid_python is None:
            pytest.skip(f"grading {name} in uid mode: {why}")
        python, sandbox, guard = uid_python, ["--sandbox", "uid"], locked_checkout()
    elif (needs == "bwrap" or isolation == "bwrap") and not BWRAP:
        pytest.skip(f"grading {name} safely needs bubblewrap ({WHY})")
    elif isolation == "bwrap":
        sandbox = ["--sandbox", "bwrap"]
    if needs == "seccomp" and not SECCOMP:
        pytest.skip(f"grading {name} needs the seccomp filter (Linux x86_64/aarch64)")
    out, gs, junit = tmp_path / "result.json", tmp_path / "gradescope.json", tmp_path / "junit.xml"
    folder = build_cheat(name, tmp_path / "built")
    with guard:
        proc = subprocess.run(
            [python, "-m", "grader", str(folder), "--problems", ",".join(targets), "--profile", "dev",
             "--json", str(out), "--gradescope", str(gs), "--junit", str(junit), *sandbox,
             # the forged ones are whole problems of real work: the rubric's limits, as a real submission gets
             *([] if name.startswith("forge_") else ["--call-cpu", "4"])],
            cwd=REPO, capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, f"the grader failed on {name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    result, gradescope = json.loads(out.read_text()), json.loads(gs.read_text())
    if isolation != "auto":
        assert result["sandbox"].startswith("bubblewrap" if isolation == "bwrap" else "unprivileged uid "), \
            result["sandbox"]
    by = {p["name"]: p for p in result["problems"]}
    rubric = {p.name: p for p in load().problems}
    for problem, tests in targets.items():
        p = by[problem]
        assert p["status"] != "grader error" and not any("regraded" in n for n in result["notes"]), \
            (p["status"], result["notes"], p["output"][:2000])
        lost = {i.name for t in tests for i in rubric[problem].items_of(t)}
        for item in p["items"]:
            if item["name"] in lost:
                assert item["score"] == 0, (name, item)
            elif name in EXACTLY_ITS_ITEMS:
                assert item["score"] == item["points"], (name, item, p["output"][:2000])
        if not tests:  # nothing to lose: a correct part, graded as one
            assert p["score"] == p["max_score"], p["output"][:2000]
    visible = _visible(proc, gradescope, junit)
    assert "grader-" not in visible, "a path of the grader's temporary folder reached a student"
    if name == "number_channels":  # nothing it sent in the hidden checks reaches what students read
        public = {int(s) for s in re.findall(r"SENT-STATUS (\d+)", by["precision"]["log"])}
        shown = {int(s) for s in re.findall(r"exited with status (\d+)", visible)}
        assert shown <= public, (shown, public)
        assert "LEAKED-TEXT" not in visible and "LEAKED-TEXT" not in json.dumps(by["precision"]["checks"])
    if name == "paths_in_messages":  # said, with the grader's folder named as such, and no install path
        assert "<grader's folder>" in visible and "<site-packages>/torch/" in visible, visible[:3000]
        installed = {sys.prefix, sys.base_prefix, os.path.dirname(os.__file__), os.path.dirname(torch.__file__)}
        assert not [p for p in installed if p in visible] and "-packages/" not in visible.replace(
            "<site-packages>/", ""), visible[:3000]
    if name == "scheduler_starved":
        assert by["precision"]["status"] == "timeout" and "LOWERED" not in by["precision"]["log"], \
            by["precision"]["log"][:2000]
    if name == "server_limits":  # refused, and the next problem's worker started as ever
        assert "SERVER REACHED" not in by["precision"]["log"] and "REFUSED" in by["precision"]["log"], \
            by["precision"]["log"][:2000]
    if name == "namespace_offload":
        assert "PRIVATE TMPFS MOUNTED" not in by["training"]["log"], by["training"]["log"][:2000]


def test_hidden_inputs_follow_the_recorded_seed(tmp_path):
    """Hidden checks draw from the run's seed, recorded in --json for
    instructors: the same seed replays the same inputs, another seed draws
    others (a leak is not replayable). The submission prints what it is called
    with, to the instructors' log of its hidden checks."""
    sub = tmp_path / "sub" / "student"
    sub.mkdir(parents=True)
    (sub / "__init__.py").write_text("")
    (sub / "precision.py").write_text(
        "def _show(*args):\n    print(repr(args), flush=True)\n    raise NotImplementedError\n\n"
        "bytes_per_element = tensor_bytes = float_format = underflows = overflows = _show\n")
    logs = {}
    for run, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        (tmp_path / run).mkdir()
        _, result, gradescope = _grade(sub.parent, "precision", tmp_path / run, "--seed", seed, "--reveal-hidden")
        assert result["seed"] == int(seed) and "seed" not in json.dumps(gradescope).lower()
        logs[run] = result["problems"][0]["hidden_log"]
    assert logs["a"] and logs["a"] == logs["b"], "the same seed did not replay the same inputs"
    assert logs["a"] != logs["c"], "another seed drew the same hidden inputs"


def test_memory_hungry_batch_fits_the_machine(tmp_path):
    """``batch --jobs 2`` over two submissions that hoard 256 MiB tensors until refused:
    host memory (sampled from here) grows by no more than the plan's budget, jobs
    times (the trusted share plus two workers' limits), which fits the free memory."""
    import shutil
    import threading

    import psutil

    from grader.sandbox.limits import TRUSTED_SHARE_BYTES, plan_jobs

    subs = tmp_path / "subs"
    for name in ("one", "two"):
        shutil.copytree(CHEATS / "memory_hungry", subs / name)
    jobs, per_worker, _ = plan_jobs(2, 2 << 30)
    budget = jobs * (TRUSTED_SHARE_BYTES + 2 * per_worker)
    assert budget <= psutil.virtual_memory().available
    start = psutil.virtual_memory()
    peak, stop = [start.total - start.available], threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            vm = psutil.virtual_memory()
            peak.append(vm.total - vm.available)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "grader", "batch", str(subs), "--out", str(tmp_path / "out"), "--jobs", "2",
             "--problems", "precision", "--profile", "dev", "--memory-limit", "2"],
            cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        stop.set()
        sampler.join()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    grown = max(peak) - peak[0]
    print(f"peak host memory growth: {grown / (1 << 20):.0f} MiB (budget {budget / (1 << 20):.0f} MiB)")
    assert grown <= budget, f"host memory grew by {grown >> 20} MiB, more than the {budget >> 20} MiB budget"
    for name in ("one", "two"):
        rec = json.loads((tmp_path / "out" / "results" / f"{name}.json").read_text())
        assert rec["status"] == "graded" and rec["score"] == 0, rec


@pytest.mark.skipif(not SECCOMP, reason="the seccomp filter is Linux x86_64/aarch64 only")
def test_fork_bomb_creates_no_process(tmp_path):
    """Counted from outside, as the grader runs (root included): the grader's
    process tree never holds more than the grader, its trusted pytest and a
    worker's sandbox (and a spare's)."""
    import psutil

    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader", str(CHEATS / "fork_bomb"), "--problems", "precision", "--profile", "dev",
         "--json", str(tmp_path / "result.json"), "--cpu-budget", "60", "--call-cpu", "10"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp")})
    most = 0
    while True:
        try:
            proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(psutil.Error):
            most = max(most, len(psutil.Process(proc.pid).children(recursive=True)))
    assert proc.returncode == 0
    assert 3 <= most <= 8, f"the grader's process tree reached {most} processes"
    assert json.loads((tmp_path / "result.json").read_text())["score"] == 0
