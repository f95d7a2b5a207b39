"""The rubric (grader/rubric.toml): problems, points, checks, visibility, limits.

Every point comes from the TOML file; this module only reads and validates it,
and is the one reader of that file: :func:`load` for the grading rubric,
:func:`read_table` for a table another module interprets (``[mfu]``, read by
grader/mfu/check.py, is also on :attr:`Rubric.mfu`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from grader.util import PROFILES, REPO, tomllib

DEFAULT_RUBRIC = Path(__file__).resolve().with_name("rubric.toml")
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")

__all__ = [
    "DEFAULT_RUBRIC", "VISIBILITIES", "Item", "Problem", "Rubric", "RubricError", "Settings", "function_name",
    "is_hidden", "load", "param_ids", "read_table",
]


class RubricError(ValueError):
    """The rubric file is malformed."""


@dataclass(frozen=True)
class Item:
    """A share of a problem's points: earned when every check it holds passes."""

    name: str
    points: float
    checks: tuple[str, ...]  # fnmatch patterns over check (test function) names, without parameters
    gate: bool = False  # the problem's other items earn nothing unless this one passes
    #: fnmatch patterns over a parametrized check's parameter ids (``SGD`` of
    #: ``test_x[SGD-lr]``): the item holds only the checks one of whose ids
    #: matches (every check, when empty; an unparametrized check, always)
    params: tuple[str, ...] = ()

    def matches(self, function: str, ids: tuple[str, ...] = ()) -> bool:
        if not any(fnmatchcase(function, pattern) for pattern in self.checks):
            return False
        return not self.params or not ids or any(fnmatchcase(i, p) for i in ids for p in self.params)


#: Keys an older rubric file used, and what they are now: a problem's check
#: files are ``files``, an item's patterns over check names are ``checks``.
_RENAMED_HINT = {"tests": " (an item's patterns are now `checks`)",
                 "checks": " (a problem's check files are now `files`; `checks` belongs in [[problem.item]])"}


def function_name(test: str) -> str:
    """The test function of a node id or name: ``tests/x.py::test_a[p]`` -> ``test_a``."""
    return test.split("::")[-1].split("[")[0]


def param_ids(test: str) -> tuple[str, ...]:
    """The parameter ids of a node id: ``tests/x.py::test_a[SGD-lr]`` -> ``("SGD", "lr")``."""
    name = test.split("::")[-1]
    return tuple(name[name.index("[") + 1: name.rindex("]")].split("-")) if "[" in name else ()


@dataclass(frozen=True)
class Problem:
    name: str
    section: str
    points: float
    visibility: str
    files: tuple[str, ...]  # its check files
    gpu: bool = False
    items: tuple[Item, ...] = ()
    cpu_budget: float | None = None  # CPU seconds for its checks; None: from the reference's cost (grader/budgets.py)
    sealed_optim: bool = False  # its workers get a sealed torch.optim (its checks compare with torch.optim's)

    def items_of(self, test: str, extends: str = "") -> list[Item]:
        """The items a check counts toward (exactly one in a consistent rubric).

        ``test`` is the check's node id or function name; ``extends`` the node id
        its ``extends`` marker names (hidden checks). The extended public test
        decides; a check without the marker, or whose named test no pattern
        matches, is matched by its own name. An item with ``params`` holds
        only the checks of those parameters (its own node id's).
        """
        ids = param_ids(test)
        if extends:
            found = [i for i in self.items if i.matches(function_name(extends), ids)]
            if found:
                return found
        return [i for i in self.items if i.matches(function_name(test), ids)]

    def check_files(self, root: Path = REPO, *, public_only: bool = False) -> list[str]:
        """The check files that exist (hidden ones dropped in public-only mode)."""
        return [c for c in self.files if (root / c).is_file() and not (public_only and is_hidden(c))]


@dataclass(frozen=True)
class Settings:
    """The rubric's [settings]: see the comments in rubric.toml."""

    profile: str = "grade"
    call_cpu: float = 60.0
    start_cpu: float = 60.0
    slowdown: float = 5.0
    budget_floor: float = 20.0
    wall_factor: float = 10.0
    memory_limit_gib: float = 8.0
    worker_memory_mib: float = 512.0
    reveal_hidden: bool = False


@dataclass(frozen=True)
class Rubric:
    settings: Settings
    problems: tuple[Problem, ...]
    path: Path
    mfu: dict[str, Any] = field(default_factory=dict)  # the [mfu] table as written (grader/mfu/check.py checks it)

    def problem(self, name: str) -> Problem:
        for p in self.problems:
            if p.name == name:
                return p
        raise KeyError(name)


def is_hidden(check: str) -> bool:
    """Hidden checks live under grader/ (never shipped to students)."""
    return not check.startswith("tests/")


def _num(where: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (positive and not v > 0) or v < 0:
        raise RubricError(f"{where} must be a {'positive ' if positive else ''}number, got {v!r}")
    return float(v)


def _items(where: str, raw: Any, points: float) -> tuple[Item, ...]:
    """A problem's [[problem.item]] tables, validated: names unique, points
    positive and adding up to the problem's, patterns non-empty strings."""
    if not isinstance(raw, list) or not raw:
        raise RubricError(f"{where}: needs [[problem.item]] tables (name, points, checks)")
    items: list[Item] = []
    for j, it in enumerate(raw):
        at = f"{where} item #{j + 1}"
        if not isinstance(it, dict):
            raise RubricError(f"{at}: must be a table")
        extra = set(it) - {"name", "points", "checks", "gate", "params"}
        if extra:
            raise RubricError(f"{at}: unknown keys {sorted(extra)}" + _RENAMED_HINT.get(min(extra), ""))
        name = it.get("name")
        if not isinstance(name, str) or not name.strip() or name in {i.name for i in items}:
            raise RubricError(f"{at}: name must be a non-empty string, unique in the problem, got {name!r}")
        checks = it.get("checks")
        if not isinstance(checks, list) or not checks or not all(
                isinstance(t, str) and t.startswith("test") and "::" not in t and "/" not in t for t in checks):
            raise RubricError(f"{at} ({name}): checks must be a non-empty list of test function name patterns "
                              f"(e.g. \"test_xavier_init_*\"), got {checks!r}")
        gate = it.get("gate", False)
        if not isinstance(gate, bool):
            raise RubricError(f"{at} ({name}): gate must be true or false")
        params = it.get("params", [])
        if not isinstance(params, list) or not all(isinstance(p, str) and p for p in params):
            raise RubricError(f"{at} ({name}): params must be a list of parameter id patterns, got {params!r}")
        items.append(Item(name, _num(f"{at}.points", it.get("points")), tuple(checks), gate, tuple(params)))
    total = sum(i.points for i in items)
    if abs(total - points) > 1e-9:
        raise RubricError(f"{where}: its items' points add up to {total:g}, not the problem's {points:g}")
    return tuple(items)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RubricError(f"{path}: {e}") from e


def read_table(path: Path, name: str) -> dict[str, Any]:
    """The top-level table ``name`` of the rubric file ``path``, as written
    ({} when the file or the table does not exist); RubricError when the file
    cannot be read or parsed, or ``name`` is not a table."""
    if not Path(path).is_file():
        return {}
    table = _read(path).get(name, {})
    if not isinstance(table, dict):
        raise RubricError(f"{path}: [{name}] must be a table")
    return dict(table)


def load(path: Path = DEFAULT_RUBRIC) -> Rubric:
    """Read and validate a rubric file."""
    raw = _read(path)
    s = dict(raw.get("settings", {}))
    unknown = set(s) - set(Settings.__dataclass_fields__)
    if unknown:
        raise RubricError(f"{path}: unknown settings {sorted(unknown)}")
    settings = Settings(**s)
    if settings.profile not in PROFILES:
        raise RubricError(f"{path}: settings.profile must be one of {PROFILES}")
    for key in ("call_cpu", "start_cpu", "slowdown", "budget_floor", "wall_factor", "memory_limit_gib",
                "worker_memory_mib"):
        _num(f"{path}: settings.{key}", getattr(settings, key))
    problems, seen = [], set()
    for i, p in enumerate(raw.get("problem", [])):
        where = f"{path}: problem #{i + 1}"
        name = p.get("name")
        if not isinstance(name, str) or not name.isidentifier() or name in seen:
            raise RubricError(f"{where}: name must be a unique identifier, got {name!r}")
        seen.add(name)
        extra = set(p) - {"name", "section", "points", "visibility", "files", "cpu_budget", "gpu", "sealed_optim",
                          "item"}
        if extra:
            raise RubricError(f"{where} ({name}): unknown keys {sorted(extra)}" + _RENAMED_HINT.get(min(extra), ""))
        vis = p.get("visibility", "visible")
        if vis not in VISIBILITIES:
            raise RubricError(f"{where} ({name}): visibility must be one of {VISIBILITIES}, got {vis!r}")
        files = p.get("files", [f"tests/test_{name}.py", f"grader/hidden/test_{name}_hidden.py"])
        if not isinstance(files, list) or not all(isinstance(c, str) and c.endswith(".py") for c in files):
            raise RubricError(f"{where} ({name}): files must be a list of .py paths")
        if any(c.startswith("/") or ".." in Path(c).parts for c in files):
            raise RubricError(f"{where} ({name}): files must be relative paths inside the repository")
        points = _num(f"{where}.points", p.get("points"))
        sealed_optim = p.get("sealed_optim", False)
        if not isinstance(sealed_optim, bool):
            raise RubricError(f"{where} ({name}): sealed_optim must be true or false, got {sealed_optim!r}")
        problems.append(Problem(
            name=name, section=str(p.get("section", "")), points=points,
            visibility=vis, files=tuple(files),
            gpu=bool(p.get("gpu", False)),
            items=_items(f"{where} ({name})", p.get("item"), points),
            cpu_budget=_num(f"{where}.cpu_budget", p["cpu_budget"]) if "cpu_budget" in p else None,
            sealed_optim=sealed_optim,
        ))
    if not problems:
        raise RubricError(f"{path}: no [[problem]] entries")
    every_file = [c for p in problems for c in p.files]
    if len(every_file) != len(set(every_file)):
        raise RubricError(f"{path}: a check file belongs to two problems")
    mfu = raw.get("mfu", {})
    if not isinstance(mfu, dict):
        raise RubricError(f"{path}: [mfu] must be a table")
    return Rubric(settings, tuple(problems), Path(path), dict(mfu))
