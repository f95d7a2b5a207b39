"""The optimizers' worker seals torch.optim (grader/worker/seal.py ``seal_torch_optim``)
and staging refuses what Python would import differently from what the grader
reads (grader/staging/workcopy.py ``check_plain_modules``).

Sealing changes the process it runs in for good, so it runs in a child process
that reports, as JSON, what each route to torch.optim's optimizers did.

In bubblewrap mode the optimizers' worker also sees sealed copies of
torch.optim's algorithm sources and no torch.optim bytecode
(grader/sandbox/optimseal.py): the routes that rebuild torch's optimizers from its
files on disk, which the in-process seal cannot stop. In uid mode Landlock's
read rules do that: test_sealed_optim_landlock.py."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.protocol import ProblemSpec
from grader.sandbox.isolation import Sandbox, bwrap_usable
from grader.sandbox.limits import Limits
from grader.sandbox.optimseal import SealedOptim, algorithm_files, carve, module_name, optim_dir, seal_source
from grader.sandbox.remote import RemoteImpl
from grader.staging.workcopy import SubmissionError, make_working_copy

REPO = Path(__file__).resolve().parent.parent
BWRAP, WHY = bwrap_usable()
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bubblewrap is unusable here: {WHY}")

ROUTES = r'''
import builtins, importlib, json, operator, pkgutil, sys
import torch
from grader.worker.seal import seal_torch_optim

report = {"left": seal_torch_optim()}
p = torch.nn.Parameter(torch.ones(3))
p.grad = torch.ones(3)
adam_args = dict(grad_scale=None, found_inf=None, amsgrad=False, has_complex=False, beta1=0.9, beta2=0.9,
                 lr=0.1, weight_decay=0.0, eps=1e-8, maximize=False, capturable=False, differentiable=False,
                 decoupled_weight_decay=False)
adam_lists = lambda: ([p], [p.grad], [torch.zeros(3)], [torch.zeros(3)], [], [torch.tensor(0.0)])


def bare_sgd():
    """An SGD built by Optimizer.__init__ alone (SGD's own __init__ skipped)."""
    opt = object.__new__(torch.optim.SGD)
    torch.optim.Optimizer.__init__(opt, [p], dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0,
                                                  nesterov=False, maximize=False, foreach=None,
                                                  differentiable=False, fused=None))
    return opt


def undo_registrations():
    """Destroy every torch.library.Library the garbage collector finds, and run
    every pending finalizer (a Library's own undoes its kernels)."""
    import gc, weakref
    for lib in [o for o in gc.get_objects() if isinstance(o, torch.library.Library)]:
        lib._destroy()
    for fin in list(getattr(weakref.finalize, "_registry", {})):
        fin()


routes = {
    "attribute": lambda: torch.optim.Adam([p]).step(),
    "__init__ bypassed": lambda: bare_sgd().step(),
    "pkgutil.resolve_name": lambda: pkgutil.resolve_name("torch.optim.adam:Adam")([p]).step(),
    "__subclasses__": lambda: next(c for c in torch.optim.Optimizer.__subclasses__() if c.__name__ == "RMSprop")(
        [p]).step(),
    "builtins.__import__": lambda: builtins.__import__("torch.optim", fromlist=["Adagrad"]).Adagrad([p]).step(),
    "operator.attrgetter": lambda: operator.attrgetter("optim.AdamW")(torch)([p]).step(),
    "functional": lambda: sys.modules["torch.optim.adam"].adam(*adam_lists(), **{
        k: v for k, v in adam_args.items() if k not in ("has_complex", "decoupled_weight_decay")}),
    "_single_tensor": lambda: sys.modules["torch.optim.adam"]._single_tensor_adam(*adam_lists(), **adam_args),
    "_multi_tensor": lambda: sys.modules["torch.optim.adam"]._multi_tensor_adam(*adam_lists(), **adam_args),
    "_functional": lambda: sys.modules["torch.optim._functional"].sgd(
        [p], [p.grad], [None], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False,
        maximize=False),
    "__globals__ registry": lambda: torch.optim.Optimizer.__repr__.__globals__["_single_tensor_adam"](
        *adam_lists(), **adam_args),
    "importlib.reload": lambda: importlib.reload(sys.modules["torch.optim.adam"]).Adam([p]).step(),
    "fresh import": lambda: importlib.import_module("torch.optim._multi_tensor").Adam([p]).step(),
    "fused kernel": lambda: torch._fused_sgd_([p], [p.grad], [], weight_decay=0.0, momentum=0.0, lr=0.1,
                                              dampening=0.0, nesterov=False, maximize=False, is_first_step=True),
    "fused op": lambda: torch.ops.aten._fused_adamw_.default(
        [p], [p.grad], [torch.zeros(3)], [torch.zeros(3)], [], [torch.tensor(1.0)], lr=0.1, beta1=0.9,
        beta2=0.9, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False),
    # Last: it undoes every registration Python can reach before calling the kernel.
    "fused kernel, registrations undone": lambda: (undo_registrations(), torch._fused_sgd_(
        [p], [p.grad], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False, maximize=False,
        is_first_step=True)),
}
before = p.detach().clone()
report["routes"] = {}
for name, route in routes.items():
    try:
        with torch.no_grad():  # as an optimizer's step runs
            route()
        report["routes"][name] = "ran"
    except Exception as e:
        report["routes"][name] = f"{type(e).__name__}: {e}"
report["unchanged"] = bool(torch.equal(p.detach(), before))


class Mine(torch.optim.Optimizer):
    def __init__(self, params, lr=0.5):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            ps = [q for q in group["params"] if q.grad is not None]
            torch._foreach_add_(ps, [q.grad for q in ps], alpha=-group["lr"])


opt = Mine([p])
torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
opt.step()
opt.zero_grad()
opt.load_state_dict(opt.state_dict())
report["own"] = p.detach().tolist()
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def sealed() -> dict:
    proc = subprocess.run([sys.executable, "-c", ROUTES], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_no_original_survives(sealed):
    """No function of torch.optim's algorithm modules is alive after sealing
    (every reference the garbage collector sees was replaced)."""
    assert sealed["left"] == []


def test_every_route_to_torch_optim_fails(sealed):
    ran = {name: what for name, what in sealed["routes"].items() if what == "ran"}
    assert not ran, f"these routes reached torch.optim's optimizers: {sorted(ran)}"
    for name, what in sealed["routes"].items():
        assert "is not available to submissions" in what, (name, what)
    assert sealed["unchanged"], "a sealed route still updated the parameter"


def test_own_optimizer_and_schedulers_still_work(sealed):
    """torch.optim.Optimizer, lr_scheduler and torch._foreach_* stay usable:
    the reference's way of writing an optimizer is untouched."""
    assert sealed["own"] == [0.5, 0.5, 0.5]


@pytest.mark.parametrize("entry", ["optimizers/__init__.py", "optimizers.cpython-311-x86_64-linux-gnu.so",
                                   "optimizers.abi3.so", "optimizers.pyd", "optimizers.pyc", "hook.pth",
                                   "ns/helper.py"])
def test_staging_refuses_what_would_import_unread(tmp_path, entry):
    student = tmp_path / "sub" / "student"
    (student / entry).parent.mkdir(parents=True, exist_ok=True)
    (student / "__init__.py").write_text("")
    (student / "optimizers.py").write_text("x = 1\n")
    (student / entry).write_text("")
    with pytest.raises(SubmissionError, match=r"student/(optimizers|ns)/? is a folder|not a plain Python module"):
        make_working_copy(student, tmp_path / "work")


def test_staging_copies_plain_modules_only(tmp_path):
    """Files that import as nothing are left out, __pycache__ is dropped, and a
    link is never followed: the working copy holds exactly the plain modules."""
    student = tmp_path / "sub" / "student"
    (student / "__pycache__").mkdir(parents=True)
    (student / "__pycache__" / "views.cpython-311.pyc").write_bytes(b"\0")
    for name in ("__init__.py", "views.py", "_helper.py", "notes.txt", ".DS_Store", "my-notes.py"):
        (student / name).write_text("")
    work = make_working_copy(student, tmp_path / "work")
    assert sorted(p.name for p in (work / "student").iterdir()) == ["__init__.py", "_helper.py", "views.py"]


def test_source_check_names_a_rebound_decoy():
    """The first line (tests/static.py, clear feedback): a class the module
    rebinds later is a decoy, whatever its bases; the reference rebinds none."""
    from tests import static
    from tests.local import LocalImpl

    cheat = static.delegation_facts(LocalImpl(str(REPO / "grader" / "corpus" / "cheat" / "dynamic_delegation")))
    assert cheat.subclasses_optimizer("Adam")  # what the class definition alone says
    assert any("Adam is rebound after its class definition" in use for use in cheat.uses), cheat.uses
    assert static.delegation_facts(LocalImpl("reference")).uses == []


# --------------------------------------------------------------------------- which problem is sealed
class _Spawned(Exception):
    """Raised by the fake fork server's spawn: a worker's start got that far."""


def test_the_rubric_seals_the_optimizers_and_a_sealed_problem_gets_a_sealed_server(tmp_path, monkeypatch):
    """The rubric marks the optimizers, and only them, ``sealed_optim``; the
    plan's ProblemSpec carries it; RemoteImpl starts a sealed fork server for
    that problem and a plain one for another, and never serves a sealed
    problem from a server that is not sealed (a grader fault, no worker).
    The fork servers are fakes: nothing starts."""
    from grader import budgets, rubric
    from grader.sandbox import remote
    from grader.sandbox.errors import GraderFault

    rub = rubric.load()
    assert [p.name for p in rub.problems if p.sealed_optim] == ["optimizers"]
    plan = budgets.Budgets("dev", budgets.Costs(), slowdown=5.0, floor=20.0, speed=1.0)
    specs = [plan.spec(rub.problem(name), ()) for name in ("precision", "optimizers")]
    assert [s.sealed_optim for s in specs] == [False, True]

    asked: list[bool] = []
    unsealed = []  # set: every server started comes up unsealed, whatever it was asked

    class FakeServer:
        meter = None

        def __init__(self, sandbox, work, scratch, config, reply_bytes, sealed_optim):
            asked.append(config.seal)
            self.config = dataclasses.replace(config, seal=False) if unsealed else config

        def alive(self) -> bool:
            return True

        def wait_ready(self, limit) -> None:
            pass

        def kill(self) -> None:
            pass

        def spawn(self, limit):
            raise _Spawned

    monkeypatch.setattr(remote, "ForkServer", FakeServer)
    (tmp_path / "work" / "student").mkdir(parents=True)
    (tmp_path / "scratch").mkdir()
    sandbox = Sandbox.restored("rlimits", "test", limits=Limits(memory_bytes=3 << 30), cuda=False)
    impl = RemoteImpl("test", sandbox, tmp_path / "work", tmp_path / "scratch", specs)
    for name in ("precision", "optimizers"):
        impl.enter(name)
        with pytest.raises(_Spawned):
            impl._worker()
    assert asked == [False, True]
    impl.close()

    unsealed.append(True)
    impl = RemoteImpl("test", sandbox, tmp_path / "work", tmp_path / "scratch", specs[1:])
    impl.enter("optimizers")
    with pytest.raises(GraderFault, match="not be sealed"):
        impl._worker()
    assert asked[2:] == [True] and "not be sealed" in impl.states["optimizers"].fault
    impl.close()


# --------------------------------------------------------------------------- torch.optim's files, sealed


def _outside_functions(tree: ast.Module) -> list[ast.stmt]:
    """The statements of a module that are not inside a function body (class
    bodies and ``if``/``try`` blocks included), in order."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop(0)
        out.append(node)
        if isinstance(node, ast.ClassDef | ast.If | ast.Try):
            todo += [*node.body, *getattr(node, "orelse", [])]
    return out


def _bound_names(tree: ast.Module) -> dict[str, set[str]]:
    """The names a module binds at its top level, and those each of its
    classes binds in its body (keyed by the class name)."""

    def names(body: list[ast.stmt]) -> set[str]:
        out: set[str] = set()
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.add(stmt.name)
            elif isinstance(stmt, ast.Import | ast.ImportFrom):
                out |= {a.asname or a.name.split(".")[0] for a in stmt.names}
            elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                out |= {ast.unparse(t) for t in targets}
            elif isinstance(stmt, ast.If | ast.Try):
                out |= names(stmt.body) | names(stmt.orelse)
        return out

    found = {"": names(tree.body)}
    for node in _outside_functions(tree):
        if isinstance(node, ast.ClassDef):
            found[node.name] = names(node.body)
    return found


def _decorated(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """Each function and method outside a function body, with its decorators."""
    return [(node.name, [ast.unparse(d) for d in node.decorator_list]) for node in _outside_functions(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_sealed_sources_keep_every_name_and_no_function_body():
    """Every algorithm source of torch.optim (and none of the modules the
    worker keeps) is sealed: its docstring and every name it binds (module and
    class level, decorators included) stay, every function and method body is
    one raise, and no line of an update rule is left."""
    optim = optim_dir()
    files = algorithm_files(optim)
    rels = {p.relative_to(optim).as_posix() for p in files}
    assert {"adam.py", "adamw.py", "sgd.py", "_functional.py", "_multi_tensor/__init__.py"} <= rels, rels
    assert not rels & {"__init__.py", "optimizer.py", "lr_scheduler.py", "swa_utils.py", "_stateless.py"}
    for path in files:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(optim).as_posix()
        original, sealed = ast.parse(text), ast.parse(seal_source(text, module_name(optim, path), rel))
        assert ast.get_docstring(sealed) == ast.get_docstring(original), rel
        assert _bound_names(sealed) == _bound_names(original), rel
        functions = [n for n in ast.walk(sealed) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        assert functions, rel
        for fn in functions:
            assert len(fn.body) == 1 and isinstance(fn.body[0], ast.Raise), (rel, fn.name)
            assert "is not available to submissions" in ast.unparse(fn.body[0]), (rel, fn.name)
        assert _decorated(sealed) == _decorated(original), rel  # (functions nested in bodies went with them)
    adam = seal_source((optim / "adam.py").read_text(encoding="utf-8"), "torch.optim.adam", "adam.py")
    assert "exp_avg_sq.mul_" in (optim / "adam.py").read_text(encoding="utf-8")
    assert "exp_avg_sq.mul_" not in adam and "torch._foreach_" not in adam


def test_only_a_sealed_worker_gets_the_binds(tmp_path):
    """The bubblewrap command binds each sealed copy over torch's file and an
    empty folder over each __pycache__ of torch.optim, read-only and after the
    binds that hold torch, only when asked to; other modes ignore them."""
    sealed = SealedOptim.create(tmp_path)
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    limits = Limits(memory_bytes=1 << 30)
    bwrap = Sandbox.restored("bwrap", "bubblewrap", limits=limits, cuda=False)
    plain = bwrap.command(work, scratch, ["fork-server", "3", "{}"])[0]
    argv = bwrap.command(work, scratch, ["fork-server", "3", "{}"], sealed)[0]
    caches = {str(p) for p in sealed.optim.rglob("__pycache__")}
    expected = {str(dest) for _, dest in sealed.files} | caches
    assert len(sealed.files) == len(algorithm_files(sealed.optim)) and not expected & set(plain)
    at = {argv[i + 2]: i for i, a in enumerate(argv[:-2]) if a == "--ro-bind" and argv[i + 2] in expected}
    assert set(at) == expected
    assert [a for i, a in enumerate(argv) if not any(0 <= i - j < 3 for j in at.values())] == plain
    for dest, i in at.items():
        source = Path(argv[i + 1])
        assert source.is_relative_to(sealed.root)
        assert (source.is_dir() and not any(source.iterdir())) if dest in caches else source.is_file()
    holds_torch = [i for i, a in enumerate(argv[:-2]) if a == "--ro-bind"
                   and str(sealed.optim).startswith(argv[i + 2].rstrip("/") + "/")]
    assert holds_torch and max(holds_torch) < min(at.values()), "a sealed copy bound before torch's folder"
    rlimits = Sandbox.restored("rlimits", "rlimits requested", limits=limits, cuda=False)
    assert rlimits.command(work, scratch, ["fork-server", "3", "{}"], sealed)[0] == \
        rlimits.command(work, scratch, ["fork-server", "3", "{}"])[0]
    sealed.remove()
    assert not sealed.root.exists()


#: What a worker sees of torch.optim's files, returned as data.
PROBE = """
import inspect, os, sys, torch

def required(fn):  # None for each argument fn needs (a sealed body raises before reading any)
    return {name: None for name, prm in inspect.signature(fn).parameters.items() if prm.default is prm.empty}

def probe():
    optim = os.path.dirname(torch.optim.__file__)
    adam = os.path.join(optim, "adam.py")
    with open(adam) as f:
        source = f.read()
    with open(os.path.join(optim, "optimizer.py")) as f:
        kept = f.read()
    out = {"source": source, "kept": "def zero_grad" in kept and "p.grad = None" in kept,
           "module_file": sys.modules["torch.optim.adam"].__file__ == adam,
           "bytecode": sorted(f for _, _, files in os.walk(optim) for f in files if f.endswith(".pyc"))}
    namespace = {"__name__": "torch.optim.adam", "__package__": "torch.optim"}
    exec(compile(source, adam, "exec"), namespace)
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    bare, single = object.__new__(namespace["Adam"]), namespace["_single_tensor_adam"]
    torch.optim.Optimizer.__init__(bare, [p], {"lr": 0.1, "differentiable": False})
    routes = {"Adam": lambda: namespace["Adam"]([p]),
              "Adam.step": lambda: inspect.unwrap(namespace["Adam"].step)(bare),
              "_single_tensor_adam": lambda: single(**required(single))}
    for name, route in routes.items():
        try:
            route()
            out[name] = "ran"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    out["unchanged"] = p.tolist() == [1.0, 1.0, 1.0]
    return out
"""


@needs_bwrap
def test_a_bwrap_optimizers_worker_reads_sealed_torch_optim_sources(tmp_path):
    """In bubblewrap, the optimizers' worker reads a sealed torch/optim/adam.py
    (no update rule in it), executing it gives an Adam whose constructor and
    step raise, and torch.optim holds no bytecode; the worker of another
    problem (here precision, run first) reads torch's own files. The sealed
    copies go with the RemoteImpl."""
    student = tmp_path / "sub" / "student"
    student.mkdir(parents=True)
    (student / "__init__.py").write_text("")
    for module in ("precision", "optimizers"):
        (student / f"{module}.py").write_text(textwrap.dedent(PROBE))
    scratch = tmp_path / "run" / "scratch"
    scratch.mkdir(parents=True)
    work = make_working_copy(student, tmp_path / "run" / "work")
    sandbox = Sandbox(limits=Limits(memory_bytes=3 << 30, call_cpu=120.0), want="bwrap")
    impl = RemoteImpl("test", sandbox, work, scratch,
                      [ProblemSpec("precision", 300.0, ()), ProblemSpec("optimizers", 300.0, (), sealed_optim=True)])
    root = impl._sealed_optim.root if impl._sealed_optim is not None else None
    try:
        assert root is not None and root.parent == scratch.parent, "the copies belong to the run, not the worker"
        impl.enter("precision")
        plain = impl.precision.probe()
        impl.enter("optimizers")
        sealed = impl.optimizers.probe()
    finally:
        impl.close()
    assert not root.exists(), "the sealed copies outlived the RemoteImpl"
    assert "exp_avg_sq.mul_" in plain["source"] and plain["Adam"] == "ran", plain["Adam"]
    assert "exp_avg_sq.mul_" not in sealed["source"] and "sealed copy" in sealed["source"]
    assert sealed["kept"] and sealed["module_file"], sealed
    assert sealed["bytecode"] == [], sealed["bytecode"]
    for route in ("Adam", "Adam.step", "_single_tensor_adam"):
        assert sealed[route].startswith("RuntimeError: ") and "is not available to submissions" in sealed[route], \
            (route, sealed[route])
    assert sealed["unchanged"]


def test_carved_rules_reach_everything_but_the_holes(tmp_path):
    """carve: the paths returned reach every file below the roots but the
    holes (and what is below a hole), through links too (a venv's lib64 ->
    lib), and none of them is a hole or holds one."""
    root = tmp_path / "venv"
    optim = root / "lib" / "site" / "torch" / "optim"
    (optim / "__pycache__").mkdir(parents=True)
    for rel in ("lib/site/numpy.py", "lib/site/torch/nn.py", "lib/site/torch/optim/optimizer.py",
                "lib/site/torch/optim/adam.py", "lib/site/torch/optim/__pycache__/adam.pyc", "bin/python"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "lib64").symlink_to("lib")
    holes = [str(optim / "adam.py"), str(optim / "__pycache__")]
    rules = carve([str(root), str(root / "lib64")], holes)

    def reached(path: Path) -> bool:
        real = str(path.resolve())
        return any(real == r or real.startswith(r + "/") for r in rules)

    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert {p.name for p in files if not reached(p)} == {"adam.py", "adam.pyc"}
    assert not any(h == r or h.startswith(r + "/") for h in holes for r in rules), rules
    assert str(root / "bin") in rules and str(optim / "optimizer.py") in rules
