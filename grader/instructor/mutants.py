"""``python -m grader mutants``: how many small bugs in ``reference/`` the public tests catch.

    python -m grader mutants [--problems a,b] [--max N] [--operators a,b] [--jobs J]
                             [--profile detect] [--timeout S] [--whole-file] [--corpus [--runs N]]
                             [--list] [--json FILE]

For each problem, every mutant of ``reference/<problem>.py`` (one small syntactic
change, made by cosmic-ray's mutation operators) is written into a temporary
copy of the reference laid out as a submission (``<tmp>/student/``), and the
problem's public tests run on it::

    pytest <the problem's public test files> --impl=<tmp> -x -q -p no:cacheprovider --hypothesis-profile detect

A failing run kills the mutant; a run that passes lets it survive; a run past the
timeout counts as killed (an infinite loop is caught by the grader's timeouts).
``reference/`` itself is never modified.

Most of a run's time would go to tests that never execute the mutated line, so
each problem starts with one baseline run of its public tests on the reference
under coverage.py (``grader/instructor/mutant_plugin.py``), recording which test
executes which line and how long it takes. A mutant inside a function body then
first meets only the tests that execute its line, cheapest first; if they all
pass, the whole file runs, so "survived" always means the whole file passed. A
mutant of a module-level line (a constant, a decorator, a default argument) or
of a line no test executes runs the whole file at once.

``--corpus`` runs the same way over the realistic mistakes of
``grader/corpus/wrong`` (each the reference with one patch written the way
students err) instead of the tool's mutants: "killed" then means "caught".
Each pytest run there starts from an empty example database of its own (a fresh
``HYPOTHESIS_STORAGE_DIRECTORY``), so no failure found earlier, by this entry or
another, is replayed. With ``--runs N`` each entry runs N times and counts as
caught only when every run caught it: the measure of a random profile such as
``dev``, the one a student's first ``pytest`` uses (``--corpus --profile dev
--runs 5``); an entry caught by some runs only is listed as ``sometimes``.

Mutants that cannot change behaviour are *equivalent* and left out of the rate:
those that only touch annotations or docstrings (found automatically: with
``from __future__ import annotations`` an annotation is never evaluated), and the
ones listed with a reason in ``grader/corpus/equivalent_mutants.toml``. Mutants
that change behaviour only on a CUDA device (a pinned host buffer, a device
index check) are listed with the GPU test that catches them in
``grader/corpus/cuda_only_mutants.toml``: where CUDA is available they run like
any other; elsewhere they are reported as ``cuda-only`` and left out of the
rate, since no test on that machine can see them.

Why cosmic-ray's operators and not its runner (or mutmut): both runners assume the
tests import the mutated module from where it lies (cosmic-ray rewrites the file in
place, mutmut 3 runs pytest inside its own rewritten copy), while the public tests
reach an implementation only through ``--impl FOLDER``. cosmic-ray's operators are
a library (``mutate_code`` on a string), so this driver keeps the tool's mutations
and writes each mutant where ``--impl`` can find it.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from grader import rubric
from grader.corpus import WrongSubmission
from grader.util import REPO, tomllib
from tests import handout_problems

EQUIVALENT_FILE = REPO / "grader" / "corpus" / "equivalent_mutants.toml"
CUDA_ONLY_FILE = REPO / "grader" / "corpus" / "cuda_only_mutants.toml"

#: cosmic-ray's core operators used by default: one replacement per operator kind
#: (each binary operator by its usual confusion rather than by all ten others),
#: which keeps a run in minutes while still covering arithmetic, comparisons,
#: boundaries, constants, booleans, loops, decorators and exception handling.
DEFAULT_OPERATORS = (
    "ReplaceBinaryOperator_Add_Sub", "ReplaceBinaryOperator_Sub_Add", "ReplaceBinaryOperator_Mul_Div",
    "ReplaceBinaryOperator_Div_Mul", "ReplaceBinaryOperator_FloorDiv_Div", "ReplaceBinaryOperator_Mod_FloorDiv",
    "ReplaceBinaryOperator_Pow_Mul", "ReplaceBinaryOperator_LShift_RShift", "ReplaceBinaryOperator_BitOr_BitAnd",
    "ReplaceComparisonOperator_Eq_NotEq", "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Lt_LtE", "ReplaceComparisonOperator_LtE_Lt",
    "ReplaceComparisonOperator_Gt_GtE", "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Is_IsNot", "ReplaceComparisonOperator_IsNot_Is",
    "ReplaceUnaryOperator_USub_UAdd", "ReplaceUnaryOperator_Delete_Not",
    "ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr", "ReplaceOrWithAnd",
    "ReplaceBreakWithContinue", "ExceptionReplacer", "NumberReplacer", "ZeroIterationForLoop", "RemoveDecorator",
)


@dataclass(frozen=True)
class Mutant:
    """One mutation of one reference module."""

    problem: str
    operator: str
    occurrence: int  # cosmic-ray's index of this operator's positions in the module
    line: int
    before: str  # the source line before and after, stripped (for the listing)
    after: str
    source: str  # the whole mutated module

    @property
    def key(self) -> str:
        """``problem:operator:occurrence``, the name under which an equivalent mutant is listed."""
        return f"{self.problem}:{self.operator}:{self.occurrence}"


@dataclass
class Outcome:
    """What the public tests did to one mutant."""

    key: str
    problem: str
    line: int
    before: str
    after: str
    status: str  # killed | survived | timeout | equivalent | cuda-only | sometimes (--corpus --runs)
    seconds: float
    reason: str = ""
    narrowed: bool = False  # killed by the tests that execute its line, without running the whole file


def _code_shape(source: str) -> str:
    """The module's AST without annotations and docstrings: two sources with the
    same shape behave the same (annotations are never evaluated under
    ``from __future__ import annotations``)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                      node.args.vararg, node.args.kwarg):
                if a is not None:
                    a.annotation = None
        if isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            body[0] = ast.Pass()
    return ast.dump(tree)


def _changed_line(before: str, after: str) -> tuple[int, str, str]:
    a, b = before.splitlines(), after.splitlines()
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i + 1, x.strip(), y.strip()
    n = min(len(a), len(b))
    return n + 1, (a[n].strip() if n < len(a) else ""), (b[n].strip() if n < len(b) else "")


def generate(problem: str, operators: tuple[str, ...] = DEFAULT_OPERATORS,
             reference: Path | None = None) -> Iterator[Mutant]:
    """Every mutant of ``reference/<problem>.py`` for the given cosmic-ray core operators."""
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    path = (reference or REPO / "reference") / f"{problem}.py"
    original = path.read_text()
    for name in operators:
        op = get_operator(f"core/{name}")()
        count = sum(len(list(op.mutation_positions(node))) for node in ast_nodes(get_ast(original)))
        for occurrence in range(count):
            mutated = mutate_code(original, op, occurrence)
            if mutated is None or mutated == original:
                continue
            line, before, after = _changed_line(original, mutated)
            yield Mutant(problem, name, occurrence, line, before, after, mutated)


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """``{mutant key: reason}`` from the equivalent-mutants file (or, with
    ``path=CUDA_ONLY_FILE``, the CUDA-only one: same format). An entry also
    names the source line it was written for; when the reference changed under
    it (the line differs), the entry no longer applies and the mutant counts."""
    if not path.is_file():
        return {}
    spec = tomllib.loads(path.read_text())
    return {f"{e['problem']}:{e['operator']}:{e['occurrence']}": f"{e['line']}\x00{e['reason']}"
            for e in spec.get("mutant", [])}


def listed_reason(m: Mutant, listed: dict[str, str]) -> str | None:
    """The reason ``listed`` gives for ``m``, if its entry was written for ``m``'s line."""
    entry = listed.get(m.key)
    if entry is not None:
        line, reason = entry.split("\x00", 1)
        if line.strip() == m.before:
            return reason
    return None


def equivalence(m: Mutant, listed: dict[str, str], original: str) -> str | None:
    """Why ``m`` is equivalent, or None."""
    try:
        if _code_shape(m.source) == _code_shape(original):
            return "changes only an annotation or a docstring"
    except SyntaxError:
        return None
    return listed_reason(m, listed)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass
class Baseline:
    """The public tests on the unmutated reference: per line, the node ids of the
    tests that execute it; per node id, its seconds."""

    lines: dict[int, list[str]]
    seconds: dict[str, float]
    wall: float

    def tests_for(self, line: int) -> list[str]:
        """The tests that execute ``line``, cheapest first (empty: run the whole file)."""
        return sorted(self.lines.get(line, []), key=lambda t: (self.seconds.get(t, 0.0), t))


def _submission_copy(tmp: str, problem: str, source: str | None) -> Path:
    pkg = Path(tmp) / "student"
    shutil.copytree(REPO / "reference", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    if source is not None:
        (pkg / f"{problem}.py").write_text(source)
    return pkg


def public_files(problem: str) -> list[str]:
    """The problem's public test files, as the rubric lists them."""
    return [f for f in rubric.load().problem(problem).files if not rubric.is_hidden(f)]


def _pytest(problem: str, impl: str, tests: list[str] | None, profile: str, python: str,
            timeout: float, env: dict[str, str]) -> tuple[int | None, float]:
    """(pytest's exit code or None past the timeout, seconds)."""
    cmd = [python, "-m", "pytest", *(tests or public_files(problem)), f"--impl={impl}", "-x", "-q",
           "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "grader.instructor.mutant_plugin",
           "--hypothesis-profile", profile]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env})
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start
    return proc.returncode, time.monotonic() - start


def baseline(problem: str, *, profile: str = "detect", timeout: float = 1800.0,
             python: str = sys.executable) -> Baseline:
    """Run the problem's public tests on the reference under coverage.py.

    Raises RuntimeError when they do not all pass: a mutant run means nothing then."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{problem}-base-") as tmp:
        pkg = _submission_copy(tmp, problem, None)
        out = Path(tmp) / "baseline.json"
        code, wall = _pytest(problem, tmp, None, profile, python, timeout,
                             {"GRADER_MUTANTS_TRACE": str(pkg / f"{problem}.py"), "GRADER_MUTANTS_BASELINE": str(out)})
        if code != 0 or not out.is_file():
            raise RuntimeError(f"the public tests of {problem} do not pass on reference/ "
                               f"(pytest exit {code}): fix that before measuring mutants")
        doc = json.loads(out.read_text())
    return Baseline({int(k): v for k, v in doc["lines"].items()}, doc["seconds"], wall)


def function_body_lines(source: str) -> set[int]:
    """Lines inside a function's body: they run only when a test calls the function
    (everything else runs at import, in whichever test imports the module first)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            lines.update(range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1))
    return lines


def run_mutant(m: Mutant, *, profile: str = "detect", timeout: float = 600.0,
               python: str = sys.executable, tests: list[str] | None = None,
               select: list[str] | None = None) -> tuple[str, float]:
    """Run the problem's public tests (or the pytest node ids ``tests``, or only
    the collected tests ``select``, in that order) on ``m``:
    ``("killed"|"survived"|"timeout", seconds)``."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.problem}-") as tmp:
        _submission_copy(tmp, m.problem, m.source)
        env = {}
        if select is not None:
            chosen = Path(tmp) / "select.json"
            chosen.write_text(json.dumps(select))
            env["GRADER_MUTANTS_SELECT"] = str(chosen)
        code, seconds = _pytest(m.problem, tmp, tests, profile, python, timeout, env)
    if code is None:
        return "timeout", seconds
    # pytest: 0 all passed, 1 some failed, 2+ interrupted/usage/collection errors
    # (a mutant that breaks the import is killed as surely as a failing test).
    return ("survived" if code == 0 else "killed"), seconds


def sample(items: list[Mutant], n: int | None) -> list[Mutant]:
    """At most ``n`` mutants spread evenly over the module (deterministic)."""
    if n is None or len(items) <= n:
        return items
    if n <= 0:
        return []
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def mutate_problem(problem: str, *, max_mutants: int | None = None, operators: tuple[str, ...] = DEFAULT_OPERATORS,
                   profile: str = "detect", timeout: float = 600.0, jobs: int = 1,
                   equivalent: dict[str, str] | None = None, progress: bool = True,
                   narrow: bool = True, cuda: bool | None = None) -> list[Outcome]:
    """Every mutant of ``reference/<problem>.py`` (or ``max_mutants`` of them)
    against the problem's public tests. ``cuda`` (default: whether torch sees a
    CUDA device) says whether the CUDA-only mutants run or are left out."""
    original = (REPO / "reference" / f"{problem}.py").read_text()
    listed = load_equivalent() if equivalent is None else equivalent
    cuda_only = {} if (_cuda_available() if cuda is None else cuda) else load_equivalent(CUDA_ONLY_FILE)
    outcomes: list[Outcome] = []
    to_run: list[Mutant] = []
    for m in generate(problem, operators):
        why = equivalence(m, listed, original)
        gpu = listed_reason(m, cuda_only) if why is None else None
        if why is not None:
            outcomes.append(Outcome(m.key, problem, m.line, m.before, m.after, "equivalent", 0.0, why))
        elif gpu is not None:
            outcomes.append(Outcome(m.key, problem, m.line, m.before, m.after, "cuda-only", 0.0, gpu))
        else:
            to_run.append(m)
    chosen = sample(to_run, max_mutants)
    base = baseline(problem, profile=profile) if chosen and narrow else None
    if base is not None and progress:
        print(f"  baseline  {base.wall:6.1f}s  {len(base.seconds)} tests, {len(base.lines)} lines executed",
              file=sys.stderr, flush=True)
    in_bodies = function_body_lines(original)

    def one(m: Mutant) -> Outcome:
        status, secs, narrowed = "survived", 0.0, False
        if base is not None and m.line in in_bodies and base.tests_for(m.line):
            status, secs = run_mutant(m, profile=profile, timeout=timeout, select=base.tests_for(m.line))
            narrowed = status != "survived"
        if not narrowed:
            status, more = run_mutant(m, profile=profile, timeout=timeout)
            secs += more
        if progress:
            print(f"  {status:9s} {secs:6.1f}s  {m.key}  line {m.line}: {m.after}", file=sys.stderr, flush=True)
        return Outcome(m.key, problem, m.line, m.before, m.after, status, secs, narrowed=narrowed)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes.extend(pool.map(one, chosen))
    return outcomes


def corpus_problem(problem: str, *, profile: str = "detect", timeout: float = 600.0, jobs: int = 1,
                   progress: bool = True, runs: int = 1) -> list[Outcome]:
    """The public tests of ``problem`` on each of its realistic mistakes in
    ``grader/corpus/wrong`` (whole file, stopped at the first failure), ``runs``
    times, each from an empty example database: "killed" means every run caught
    it, "sometimes" some but not all, "survived" none."""
    from grader.corpus import build_wrong, wrong_submissions

    def one(sub: WrongSubmission) -> Outcome:
        caught, seconds, code = 0, 0.0, None
        with tempfile.TemporaryDirectory(prefix=f"wrong-{problem}-") as tmp:
            folder = build_wrong(sub, Path(tmp))
            for run in range(runs):
                storage = Path(tmp) / f"hypothesis-{run}"
                code, secs = _pytest(problem, str(folder), None, profile, sys.executable, timeout,
                                     {"HYPOTHESIS_STORAGE_DIRECTORY": str(storage)})
                caught, seconds = caught + (code != 0), seconds + secs
                if code is None:
                    break
        status = ("timeout" if code is None else "killed" if caught == runs else
                  "sometimes" if caught else "survived")
        if progress:
            print(f"  {status:9s} {seconds:6.1f}s  {sub.name}" + (f"  (caught {caught}/{runs})" if runs > 1 else ""),
                  file=sys.stderr, flush=True)
        return Outcome(sub.name, problem, 0, "", sub.description, status, seconds,
                       reason=f"caught by {caught} of {runs} runs" if runs > 1 else "")

    entries = [s for s in wrong_submissions() if s.problem == problem]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, entries))


def summary(outcomes: list[Outcome]) -> tuple[int, int, int]:
    """(killed, non-equivalent run, equivalent); a timeout counts as killed, and
    CUDA-only mutants left out on a machine without CUDA are in neither count."""
    killed = sum(o.status in ("killed", "timeout") for o in outcomes)
    run = sum(o.status not in ("equivalent", "cuda-only") for o in outcomes)
    return killed, run, sum(o.status == "equivalent" for o in outcomes)


def table(results: dict[str, list[Outcome]]) -> str:
    """Killed, run, kill rate, equivalent and CUDA-only (not run) mutants per problem, as text."""
    lines = [f"{'problem':12s} {'killed':>7s} {'run':>5s} {'rate':>7s} {'equiv':>6s} {'cuda':>5s}"]
    for problem, outs in results.items():
        k, n, e = summary(outs)
        rate = f"{100 * k / n:6.1f}%" if n else "    n/a"
        c = sum(o.status == "cuda-only" for o in outs)
        lines.append(f"{problem:12s} {k:7d} {n:5d} {rate} {e:6d} {c:5d}")
    for outs in results.values():
        for o in outs:
            if o.status in ("survived", "sometimes"):
                lines.append(f"{o.status}  {o.key}  line {o.line}: {o.before!r} -> {o.after!r}" if o.line
                             else f"{o.status}  {o.key}: {o.after}" + (f" ({o.reason})" if o.reason else ""))
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m grader mutants``."""
    ap = argparse.ArgumentParser(prog="python -m grader mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", help=f"comma-separated problems (default: all: {','.join(handout_problems())})")
    ap.add_argument("--max", type=int, metavar="N", help="at most N mutants per problem, spread over the module")
    ap.add_argument("--operators", help="comma-separated cosmic-ray core operator names (default: a curated set)")
    ap.add_argument("--profile", default="detect", help="hypothesis profile for the public tests (default: detect)")
    ap.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per mutant (past it: killed)")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default: 1)")
    ap.add_argument("--whole-file", action="store_true",
                    help="run every mutant against the whole test file (no coverage baseline); slower, same verdicts")
    ap.add_argument("--corpus", action="store_true",
                    help="run grader/corpus/wrong's realistic mistakes instead of cosmic-ray's mutants")
    ap.add_argument("--runs", type=int, default=1, metavar="N",
                    help="with --corpus: run each entry N times, each from an empty example database; caught "
                         "means caught by every run (for a random profile such as dev)")
    ap.add_argument("--list", action="store_true", help="list the mutants (and equivalents) without running them")
    ap.add_argument("--json", metavar="FILE", help="write every outcome as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m grader mutants``."""
    args = parser().parse_args(argv)
    # The handout problems whose reference module is mutated (their public tests kill): the rubric's list.
    handout = list(handout_problems())
    problems = [p for p in args.problems.split(",") if p] if args.problems else handout
    unknown = sorted(set(problems) - set(handout))
    if unknown:
        print(f"grader mutants: unknown problem(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    operators = tuple(args.operators.split(",")) if args.operators else DEFAULT_OPERATORS
    try:
        import cosmic_ray  # noqa: F401
    except ModuleNotFoundError:
        print("grader mutants: needs cosmic-ray (pip install -e '.[dev]')", file=sys.stderr)
        return 1
    if args.list:
        listed, cuda_only = load_equivalent(), load_equivalent(CUDA_ONLY_FILE)
        for problem in problems:
            original = (REPO / "reference" / f"{problem}.py").read_text()
            for m in generate(problem, operators):
                why, gpu = equivalence(m, listed, original), listed_reason(m, cuda_only)
                note = f"   [equivalent: {why}]" if why else f"   [cuda-only: {gpu}]" if gpu else ""
                print(f"{m.key}  line {m.line}: {m.after}{note}")
        return 0
    results: dict[str, list[Outcome]] = {}
    for problem in problems:
        print(f"{problem}:", file=sys.stderr, flush=True)
        if args.corpus:
            results[problem] = corpus_problem(problem, profile=args.profile, timeout=args.timeout, jobs=args.jobs,
                                              runs=max(1, args.runs))
            continue
        results[problem] = mutate_problem(problem, max_mutants=args.max, operators=operators,
                                          profile=args.profile, timeout=args.timeout, jobs=args.jobs,
                                          narrow=not args.whole_file)
    sys.stdout.write(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({p: [asdict(o) for o in outs] for p, outs in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
