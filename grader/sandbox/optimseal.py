"""Sealed copies of torch.optim's algorithm sources (trusted side).

The optimizers' worker seals torch.optim in its own process before it imports
the submission (:func:`grader.worker.seal.seal_torch_optim`). A submission can undo
that without any import: execute torch's optimizer sources read from disk
(``exec(compile(open(torch.optim.adam.__file__).read(), ...))``), or load their
original bytecode from ``torch/optim/__pycache__/*.pyc`` with ``marshal``. In
bubblewrap mode those files are covered from outside the process: the
optimizers' worker (only: a problem the rubric marks ``sealed_optim``) sees,
read-only, a sealed copy over each algorithm source of torch.optim and an empty
folder over each ``__pycache__`` below it (:meth:`SealedOptim.binds`, used by
:meth:`grader.sandbox.isolation.Sandbox.command`).

A sealed copy is torch's file through an AST pass (:func:`seal_source`): the
module docstring, imports and every other module-level statement stay, and so
do class bodies (bases, class attributes, decorators), so ``import torch`` and
``torch.optim``'s own ``from .adam import Adam`` still work and every name
torch imports from those files exists; every function and method body is one
``raise RuntimeError(...)`` (so the one module whose top level calls its own
function, ``torch.optim._multi_tensor``, which nothing of torch imports, raises
when imported there: no torch code is lost that a worker needs). The copies are written by the grader, into a
folder of its own that no worker sees (created once per
:class:`grader.sandbox.remote.RemoteImpl`, removed with it), from the torch this
interpreter (and so the worker, which runs it on the same paths) imports.

In uid mode there are no mounts: the optimizers' worker imports torch from
torch's own files, then, before any submission code runs, gives up reading
every file but those :meth:`SealedOptim.readable` lists, which leave out the
files the binds would cover (Landlock, :func:`grader.worker.main.restrict_files`).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.scratch import remove_tree
from grader.worker.seal import OPTIM_KEPT, SEALED_HINT

__all__ = ["SealedOptim", "algorithm_files", "carve", "module_name", "optim_dir", "seal_source"]

def optim_dir() -> Path:
    """torch.optim's folder, on the path this interpreter imports it from (the
    worker's bubblewrap binds the same paths): from importlib's spec of torch,
    which finds it without executing anything."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("torch is not installed for this interpreter")
    folder = Path(next(iter(spec.submodule_search_locations))) / "optim"
    if not (folder / "__init__.py").is_file():
        raise FileNotFoundError(f"torch.optim has no sources at {folder}")
    return folder


def module_name(optim: Path, path: Path) -> str:
    """The module a file under torch.optim's folder is imported as."""
    parts = ["torch", "optim", *path.relative_to(optim).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def algorithm_files(optim: Path) -> list[Path]:
    """Every ``.py`` under torch.optim's folder but those of the modules the
    worker keeps usable (:data:`grader.worker.seal.OPTIM_KEPT`)."""
    return [p for p in sorted(optim.rglob("*.py"))
            if "__pycache__" not in p.parts and module_name(optim, p) not in OPTIM_KEPT]


def carve(roots: list[str], holes: list[str]) -> list[str]:
    """Paths that together reach everything below ``roots`` but ``holes``:
    each root that holds no hole as it is, and each one that does replaced by
    its entries (folders carved again). An entry that is a symbolic link is
    followed (Landlock grants what a link names, so a link to a folder that
    holds a hole, like a venv's ``lib64``, is carved too). ``holes`` are real
    paths."""
    hole = set(holes)
    out: list[str] = []
    seen: set[str] = set()

    def visit(path: str) -> None:
        path = os.path.realpath(path)
        if path in hole or path in seen:
            return
        seen.add(path)
        inside = path.rstrip("/") + "/"
        if not any(h.startswith(inside) for h in hole) or not os.path.isdir(path):
            out.append(path)
            return
        for name in sorted(os.listdir(path)):
            visit(os.path.join(path, name))

    for root in roots:
        if os.path.exists(root):
            visit(root)
    return out


class _Sealer(ast.NodeTransformer):
    """Replaces the body of every function and method by one ``raise``, and
    leaves every other statement as it is (class bodies included)."""

    def __init__(self, module: str, rel: str) -> None:
        self.module, self.rel = module, rel
        self.classes: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()
        return node

    def _seal(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.FunctionDef | ast.AsyncFunctionDef:
        # Named as grader/worker/main.py's in-process seal names the same object.
        what = (f"torch.optim's {'.'.join([*self.classes, node.name])}" if self.classes
                else f"{self.module}.{node.name}")
        message = (f"{what} is not available to submissions (the sandbox holds a sealed copy of "
                   f"torch/optim/{self.rel}): {SEALED_HINT}")
        # Not visited further: nested functions and classes go with the body.
        node.body = [ast.Raise(exc=ast.Call(func=ast.Name(id="RuntimeError", ctx=ast.Load()),
                                            args=[ast.Constant(value=message)], keywords=[]), cause=None)]
        return node

    visit_FunctionDef = _seal
    visit_AsyncFunctionDef = _seal


def seal_source(text: str, module: str, rel: str) -> str:
    """The sealed copy of one of torch.optim's sources: ``text`` is the file's,
    ``module`` its module name, ``rel`` its path below torch/optim (both for
    the messages). Raises SyntaxError when the file does not parse."""
    tree = _Sealer(module, rel).visit(ast.parse(text, filename=rel))
    ast.fix_missing_locations(tree)
    sealed = ast.unparse(tree) + "\n"
    compile(sealed, rel, "exec")  # a copy that would not compile fails here, not in every worker's import of torch
    return f"# A sealed copy of torch/optim/{rel} (grader/sandbox/optimseal.py): every function body raises.\n{sealed}"


@dataclass(frozen=True)
class SealedOptim:
    """The sealed copies of one grading run's torch.optim: ``root`` is the
    grader's folder holding them (never visible to a worker), ``optim``
    torch.optim's folder, ``files`` each (sealed copy, torch's file it covers)."""

    root: Path
    optim: Path
    files: tuple[tuple[Path, Path], ...]

    @classmethod
    def create(cls, parent: Path | None = None) -> SealedOptim:
        """Write the sealed copies into a new private folder under ``parent``
        (default: the temporary folder). Raises OSError or SyntaxError when
        torch's sources cannot be read or sealed (nothing is left behind)."""
        optim = optim_dir()
        root = Path(tempfile.mkdtemp(prefix="sealed-optim-", dir=parent))
        try:
            (root / "empty").mkdir()
            files = []
            for path in algorithm_files(optim):
                rel = path.relative_to(optim)
                copy = root / "sealed" / rel
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_text(seal_source(path.read_text(encoding="utf-8"), module_name(optim, path),
                                            rel.as_posix()), encoding="utf-8")
                files.append((copy, path))
            if not files:
                raise FileNotFoundError(f"no algorithm sources under {optim}")
        except BaseException:
            remove_tree(root)
            raise
        return cls(root, optim, tuple(files))

    def binds(self) -> list[tuple[Path, Path]]:
        """(source, destination) of each read-only bind a worker needs, in
        order: every sealed copy over torch's file, then the empty folder over
        each ``__pycache__`` below torch.optim (looked up now, so one made
        since the copies were written is hidden too)."""
        caches = sorted(p for p in self.optim.rglob("__pycache__") if p.is_dir() and not p.is_symlink())
        return [*self.files, *((self.root / "empty", cache) for cache in caches)]

    def readable(self, roots: list[str]) -> list[str]:
        """What a sealed worker in uid mode may read (its Landlock "read" rules,
        :func:`grader.worker.main.restrict_files`): ``roots`` and all below them but
        torch's files that :meth:`binds` covers in bubblewrap (each algorithm
        source, each ``__pycache__`` below torch.optim), carved out."""
        return carve(roots, [os.path.realpath(dest) for _source, dest in self.binds()])

    def remove(self) -> None:
        if os.path.lexists(self.root):
            remove_tree(self.root)
