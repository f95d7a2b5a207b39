"""Static facts about an implementation's source, read on the test's side.

Some properties are about *how* code works, not what it returns: the handout's
optimizers must imitate ``torch.optim`` without being it. Watching calls from
inside the implementation's process would be forgeable (in the grader that
process runs the submission, which can replace any spy), so the test reads the
source instead (:meth:`tests.harness.Impl.source`) and resolves, through the
module's imports, every name it uses. The module and every module of its
package it imports (statically) are read, plus the package's ``__init__``.

Dynamic access is refused rather than guessed at: ``getattr(torch.optim, ...)``,
``torch.optim`` passed around as a value, ``importlib``/``__import__``,
``eval``/``exec``/``compile`` and ``sys.modules``. None of them is needed to
write an optimizer.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tests.harness import Impl

__all__ = ["DelegationFacts", "delegation_facts"]

#: torch.optim's concrete optimizers and the modules holding their update rules.
TORCH_OPTIMIZERS = frozenset({
    "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam",
    "Rprop", "LBFGS", "SparseAdam", "Adafactor",
})
TORCH_OPTIM_MODULES = frozenset({
    "sgd", "adam", "adamw", "adagrad", "rmsprop", "adadelta", "adamax", "asgd", "nadam", "radam",
    "rprop", "lbfgs", "sparse_adam", "_adafactor", "_functional", "_multi_tensor",
})
#: What ``torch.optim.optimizer`` may be used for (the base class and typing helpers).
OPTIMIZER_MODULE_NAMES = frozenset({"Optimizer", "ParamsT", "StateDict", "required", "Kwargs"})
_DYNAMIC_CALLS = frozenset({"__import__", "eval", "exec", "compile", "globals", "vars"})
_OWN = ("student", "reference")
_BASES = ("torch.optim.Optimizer", "torch.optim.optimizer.Optimizer")


@dataclass
class DelegationFacts:
    """What the source says: ``uses`` are (file:line, what) of each use of
    torch.optim beyond its base class (or of a way to hide one);
    ``bases[name]`` the resolved base classes of each class defined."""

    uses: list[str] = field(default_factory=list)
    bases: dict[str, list[str]] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)

    def subclasses_optimizer(self, name: str) -> bool | None:
        """Whether class ``name`` derives from torch.optim.Optimizer (through
        classes defined in the read modules); None when no such class is defined."""
        if name not in self.bases:
            return None
        seen: set[str] = set()
        todo = [name]
        while todo:
            cls = todo.pop()
            if cls in seen:
                continue
            seen.add(cls)
            for base in self.bases.get(cls, []):
                if base in _BASES:
                    return True
                if base.startswith("local:"):
                    todo.append(base.removeprefix("local:"))
        return False


class _Reader(ast.NodeVisitor):
    def __init__(self, module: str, facts: DelegationFacts) -> None:
        self.module, self.facts = module, facts
        self.aliases: dict[str, str] = {}  # local name -> dotted path ("torch.optim", "own:x")
        self.own_imports: list[str] = []
        self.local_classes: set[str] = set()

    # ------------------------------------------------------------ imports
    def _own(self, level: int, name: str | None) -> str | None:
        """The package-relative module of an import, or None if not the package's own."""
        if level:
            parent = self.module.split(".")[:-1]
            if level > 1:
                parent = parent[: len(parent) - (level - 1)]
            return ".".join([*parent, *(name.split(".") if name else [])])
        if name and name.split(".")[0] in _OWN:
            return ".".join(name.split(".")[1:])
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            own = self._own(0, a.name)
            if own is not None:
                self.own_imports.append(own)
                self.aliases[a.asname or a.name.split(".")[0]] = "own:" + (own if a.asname else "")
            elif a.asname:
                self.aliases[a.asname] = a.name
            else:
                top = a.name.split(".")[0]
                self.aliases[top] = top
            self._check_path(a.name, node, imported=True)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        own = self._own(node.level, node.module)
        for a in node.names:
            if own is not None:
                sub = f"{own}.{a.name}".strip(".")
                self.own_imports += [own, sub] if own else [sub]
                self.aliases[a.asname or a.name] = f"own:{sub}"
                continue
            path = f"{node.module}.{a.name}"
            if a.name == "*":
                if (node.module or "").startswith("torch.optim") or node.module == "torch":
                    self._use(node, f"from {node.module} import *")
                continue
            self.aliases[a.asname or a.name] = path
            self._check_path(path, node, imported=True)

    # ------------------------------------------------------------ names
    def _resolve(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def _use(self, node: ast.AST, what: str) -> None:
        self.facts.uses.append(f"{self.module}.py:{getattr(node, 'lineno', '?')}: {what}")

    def _check_path(self, path: str, node: ast.AST, imported: bool = False) -> None:
        parts = path.split(".")
        if parts[0] != "torch":
            if parts[0] in ("importlib",) or path.startswith("sys.modules"):
                self._use(node, f"{path} (a dynamic import)")
            return
        if len(parts) >= 2 and parts[1].startswith("_fused_"):
            self._use(node, f"{path} (torch's fused optimizer kernel)")
        if len(parts) >= 2 and parts[1].startswith("__") and parts[1] != "__version__":
            self._use(node, f"{path} (reaches into torch by name)")
        if parts[:2] != ["torch", "optim"] or len(parts) < 3:
            return
        name = parts[2]
        # torch.optim.optimizer's private helpers (_use_grad_for_differentiable,
        # _get_value...) hold no update rule; its dunders and modules may.
        odd_helper = name == "optimizer" and len(parts) >= 4 and parts[3] not in OPTIMIZER_MODULE_NAMES \
            and not (parts[3].startswith("_") and not parts[3].startswith("__"))
        if name in TORCH_OPTIMIZERS or name in TORCH_OPTIM_MODULES or odd_helper:
            self._use(node, path)
        elif name.startswith("__"):
            self._use(node, f"{path} (reaches into torch.optim by name)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self._resolve(node)
        if path is not None:
            self._check_path(path, node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        path = self.aliases.get(node.id)
        if path is not None:
            self._check_path(path, node)
        elif node.id in _DYNAMIC_CALLS and isinstance(node.ctx, ast.Load):
            self._use(node, f"{node.id} (dynamic code or names)")

    def generic_visit(self, node: ast.AST) -> None:
        # A bare `torch.optim` (or `torch.optim.optimizer`, or `torch` itself
        # handed to getattr/setattr/vars) used as a value: an access by name.
        for child in ast.iter_child_nodes(node):
            path = self._resolve(child) if isinstance(child, (ast.Name, ast.Attribute)) else None
            parent_is_attr = isinstance(node, ast.Attribute) and node.value is child
            if path in ("torch.optim", "torch.optim.optimizer") and not parent_is_attr:
                self._use(child, f"{path} used as a value (access torch.optim's classes by name only)")
            if path == "torch" and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "setattr", "vars", "delattr") and child in node.args:
                self._use(child, f"{node.func.id}(torch, ...)")
        super().generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        # A class read here may be a decoy: the name it binds, rebound later
        # at module level (``Adam = wrap(found_elsewhere)``), is what imports see.
        classes = {n.name for n in node.body if isinstance(n, ast.ClassDef)}
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, ast.AnnAssign | ast.AugAssign) else []
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id in classes:
                        self._use(stmt, f"{name.id} is rebound after its class definition (the class is a decoy)")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = []
        for b in node.bases:
            path = self._resolve(b)
            if path is None and isinstance(b, ast.Name):
                path = f"local:{b.id}"
            elif path is not None and path.startswith("own:"):
                path = "local:" + path.rsplit(".", 1)[-1]
            bases.append(path or ast.unparse(b))
        self.facts.bases[node.name] = bases
        self.generic_visit(node)


def delegation_facts(impl: Impl, module: str = "optimizers") -> DelegationFacts:
    """Read ``module``, the package's ``__init__`` and every module of the
    package they import, resolving each name they use."""
    facts = DelegationFacts()
    _visit_package(impl, module, facts)
    return facts


def package_trees(impl: Impl, module: str) -> dict[str, ast.Module]:
    """The parsed source of ``module``, of the package's ``__init__`` and of
    every module of the package they import (those that parse), by name."""
    return _visit_package(impl, module, DelegationFacts())


def _visit_package(impl: Impl, module: str, facts: DelegationFacts) -> dict[str, ast.Module]:
    trees: dict[str, ast.Module] = {}
    todo, seen = [module, "__init__"], set()
    while todo:
        name = todo.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        try:
            text = impl.source(name)
        except (FileNotFoundError, ValueError):
            continue  # e.g. `from . import x` where x is a name, not a module
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            facts.uses.append(f"{name}.py does not parse: {e}")
            continue
        facts.modules.append(name)
        trees[name] = tree
        reader = _Reader(name if name != "__init__" else "__init__", facts)
        reader.visit(tree)
        todo += reader.own_imports
    return trees


# --------------------------------------------------------------------------- durability


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_rename(node: ast.Call) -> bool:
    """``os.replace(a, b)`` / ``os.rename(a, b)`` (or the bare names imported
    from os) and ``Path.replace(target)`` / ``Path.rename(target)``; not
    ``str.replace(old, new)``, which renames nothing."""
    f = node.func
    if _call_name(node) not in ("replace", "rename"):
        return False
    if isinstance(f, ast.Name) or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                                   and f.value.id == "os"):
        return True
    return len(node.args) + len(node.keywords) == 1


def fsyncs_before_renaming(trees: dict[str, ast.Module]) -> bool:
    """Whether a function of the package (``trees``, from :func:`package_trees`)
    renames a file into place and calls ``os.fsync`` before that rename,
    itself or through a function of the package that does."""
    functions = {f.name: f for t in trees.values() for f in ast.walk(t)
                 if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}

    def fsyncs(node: ast.AST, seen: frozenset[str]) -> bool:
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                name = _call_name(call)
                if name == "fsync" or (name in functions and name not in seen
                                       and fsyncs(functions[name], seen | {name})):
                    return True
        return False

    def where(node: ast.Call) -> tuple[int, int]:
        return node.lineno, node.col_offset

    for fn in functions.values():
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
        for rename in (c for c in calls if _is_rename(c)):
            if any(fsyncs(c, frozenset()) for c in calls if where(c) < where(rename)):
                return True
    return False
