"""Class similarity report: ``python -m grader similarity SUBMISSIONS_DIR --out DIR``.

Pairs of submissions ranked by the code only they share, per handout module,
for instructors who check for copied work (as MOSS or Gradescope's similarity
do). Also run by ``python -m grader batch ... --similarity`` on the batch's
submissions (into ``OUT/similarity``). A flag is a reason for a person to read
the two codes side by side, never a verdict.

Contract:

* The submissions are found, prechecked and staged by the very functions the
  batch and the grader use (:func:`grader.instructor.discovery.discover`,
  :func:`grader.instructor.precheck.precheck`, :func:`grader.sandbox.submission.locate`,
  :func:`grader.sandbox.workcopy.make_working_copy`): regular files only (symlinks and
  special files are never followed), the same caps. A submission that cannot
  be graded is listed as skipped, with the reason.
* Submission code is never imported or run: it is read as text (undecodable
  bytes replaced) and tokenized by copydetect (pygments' lexer; k-gram
  fingerprints of the code with comments and white space dropped and
  identifiers, function names and string literals replaced by placeholders,
  so renaming, re-commenting or re-formatting does not hide a copy).
* A module is compared with all the code its import would run: per handout
  module, ``student/<module>.py`` followed by every other module of
  ``student/`` it imports, directly or not, and ``student/__init__.py`` (which
  runs first) with what it imports (:func:`module_units`); a helper no handout
  module imports statically (it may be imported by name) is added to every
  handout module. So a copy moved into ``student/_impl.py`` counts where it is
  used. (Staging refuses anything in ``student/`` but plain modules.)
* Sources besides the submissions: the reference (``reference/``, when this
  checkout has it), named ``(reference)``, and, for ``optimizers``,
  torch.optim's own optimizer modules (read from the installed torch, never
  imported), named ``torch.optim (library)``: a copy of either pairs with it.
* What never counts: the stubs (every fingerprint of the stubs' code, the
  handout's signatures and docstrings); **expected code**, the fingerprints
  that two correct solutions written apart both hold (the reference and the
  entries of ``grader/corpus/correct``, by line:
  :func:`grader.corpus.correct_lineage`): code the contract dictates, which
  every honest student may write too; **common code**, fingerprints held by
  more than ``max_holders`` sources (submissions, the reference, the library
  and the corpus's lines: MOSS's ``-m``); and shared runs shorter than
  ``MIN_REGION`` tokens (idioms, not passages). What is left of a pair's shared
  code is its **rare shared code**, in regions (maximal runs of it).
* A pair's ``score`` is the larger of its two sides' shares of their own code
  (their code less the stubs', the expected and the common code) that lies in
  its rare shared regions. It is **flagged** in that module when the score
  reaches the module's threshold and the rare shared code holds at least
  ``min_tokens`` tokens (a whole 40-token function in common is not a case);
  the pair is also flagged when its modules together (:func:`whole_score`)
  reach the whole threshold. Tokens are characters of copydetect's filtered code.
* The thresholds are what stands out against honest solutions, not a fixed
  score: each module's is the highest score two complete solutions written
  apart (``grader/corpus/honest`` and the corpus's ``from_the_handout``) reach
  there plus ``margin``, at least ``threshold`` (:func:`calibrate`); the whole
  threshold likewise. Each honest pair is scored as a class of two whose own
  lines are left out of the expected code, as students whose styles the corpus
  has never seen, and the false-flag rate judges each by thresholds measured
  without it. The report's header gives it and how many solutions it was
  measured on; ``calibration.csv`` lists the pairs.
* Outputs in ``DIR``: ``pair_summary.csv`` (one row per pair of sources
  sharing any code, flagged first: its highest score, its flag and the modules
  that decided it), ``pairs.csv`` (its detail: one row per pair and module,
  flagged first, then by score; the discounted figures and the raw copydetect
  ones), ``similarity.csv`` (one row per submission for the gradebook: its
  highest score, with whom and in which module, its scores against the
  reference and the library, whether any pair of it is flagged),
  ``calibration.csv`` and ``report.html`` (one row per pair first, then the
  ranked module pairs, then each flagged module pair's code side by side, long
  lines wrapped: its rare shared regions numbered, with how many sources hold
  each, and the shared code discounted as expected, common or short marked
  apart).
  Everything taken from a submission is HTML-escaped, and the page forbids
  scripts (a Content-Security-Policy that allows no script source), so nothing
  from a submission can run in an instructor's browser.
"""

from __future__ import annotations

import argparse
import ast
import html
import importlib.util
import io
import sys
import tempfile
import tokenize
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grader.corpus import REFERENCE_LINE, correct_lineage, correct_submissions, honest_solutions
from grader.instructor.discovery import Submission, discover, unpack_export
from grader.instructor.files import csv_text
from grader.instructor.precheck import precheck
from grader.sandbox.submission import locate
from grader.sandbox.workcopy import SubmissionError, is_plain_module, make_working_copy
from grader.util import REPO, write_atomic
from tests import handout_problems

#: The handout's modules, in handout order (the rubric's list).
HANDOUT_MODULES = tuple(handout_problems())

if TYPE_CHECKING:
    from copydetect.detector import CodeFingerprint

REFERENCE_ID = "(reference)"
#: How a solution of grader/corpus/honest is named among the correct solutions (its line too).
HONEST_PREFIX = "honest-"
#: torch.optim's sources, compared as one more source of ``optimizers``.
LIBRARY_ID = "torch.optim (library)"
#: Modules of torch/optim that hold no optimizer (schedulers, weight averaging, the package's exports).
LIBRARY_SKIPPED = frozenset({"__init__.py", "lr_scheduler.py", "swa_utils.py", "_stateless.py"})

#: k: the shortest run of (filtered) code characters that counts as shared;
#: copydetect's default noise threshold.
NOISE = 25
#: Winnowing window: 1 keeps every k-gram (copydetect's default guarantee
#: threshold equals the noise threshold), so every shared run of NOISE is found.
WINDOW = 1
#: A module file larger than this is compared on its first MAX_FILE_BYTES only.
MAX_FILE_BYTES = 1 << 20

#: A shared passage shorter than this many tokens is an idiom (a guard clause,
#: a loop header), not a region: its rare code is never counted. Measured: 35
#: or 40 let honest pairs of the corpus reach 0.46 and 0.40, 60 costs copies.
MIN_REGION = 50
#: A fingerprint held by more than this many sources is common code, never
#: counted (MOSS's -m; its default).
MAX_HOLDERS = 10
#: Pairs whose score reaches this are flagged (with at least MIN_TOKENS rare
#: tokens): about twice the highest honest pair of the correct corpus (0.27
#: when it was set; :func:`calibrate` measures it again at every run), and
#: below every disguised copy of the selftest's class (0.66 and up).
THRESHOLD = 0.5
#: The least rare shared code (tokens) that makes a flag: about five lines.
MIN_TOKENS = 150
#: A module's threshold is the highest score an honest pair reaches there plus
#: this margin, and never below THRESHOLD (:func:`judged_by`): short,
#: contract-bound modules, whose independent solutions converge, flag less.
MARGIN = 0.15

PAIR_COLUMNS = ["rank", "module", "submission_a", "submission_b", "score", "threshold", "flagged", "share_a",
                "share_b",
                "rare_tokens", "own_tokens_a", "own_tokens_b", "expected_tokens", "common_tokens",
                "short_tokens", "raw_similarity", "raw_similarity_a", "raw_similarity_b", "raw_shared_tokens",
                "submitters_a", "submitters_b"]
SUBMISSION_COLUMNS = ["id", "submitters", "max_score", "most_similar_to", "module", "rare_tokens",
                      "reference_score", "library_score", "flagged", "flagged_with", "raw_max_similarity",
                      "skipped"]
PAIR_SUMMARY_COLUMNS = ["rank", "submission_a", "submission_b", "flagged", "score", "decided_by",
                        "all_modules_score", "all_modules_rare_tokens", "evidence", "submitters_a", "submitters_b"]
CALIBRATION_COLUMNS = ["module", "solution_a", "solution_b", "score", "rare_tokens", "threshold", "flagged",
                       "raw_similarity"]


@dataclass(frozen=True)
class Settings:
    """What counts and what flags (see the module's contract). ``thresholds``:
    each module's own threshold, measured on the honest solutions
    (:func:`judged_by`); a module without one uses ``threshold``."""

    threshold: float = THRESHOLD
    min_tokens: int = MIN_TOKENS
    max_holders: int = MAX_HOLDERS
    min_region: int = MIN_REGION
    margin: float = MARGIN
    thresholds: tuple[tuple[str, float], ...] = ()
    whole_threshold: float = THRESHOLD

    def threshold_of(self, module: str) -> float:
        """The score that flags a pair in ``module``."""
        return dict(self.thresholds).get(module, self.threshold)

    def flags(self, score: float, rare_tokens: int, module: str = "") -> bool:
        """Whether a pair of ``module`` with this score and rare shared code is flagged."""
        return score >= self.threshold_of(module) and rare_tokens >= self.min_tokens

    def flags_whole(self, score: float, rare_tokens: int) -> bool:
        """Whether a pair whose modules together have this score (:func:`whole_score`) is flagged."""
        return score >= self.whole_threshold and rare_tokens >= self.min_tokens


@dataclass
class Source:
    """One submission's code per handout module (or the reference's, or
    torch.optim's): what :func:`module_units` makes of its files."""

    id: str
    submitters: str = ""
    files: dict[str, str] = field(default_factory=dict)
    skipped: str = ""  # why it could not be staged (then ``files`` is empty)


@dataclass(frozen=True)
class Solution:
    """A correct solution the project holds (the reference or an entry of the
    correct corpus): its code per handout module, and its line (solutions of
    different lines were written apart; :func:`grader.corpus.correct_lineage`)."""

    name: str
    line: str
    files: dict[str, str]


@dataclass(frozen=True)
class Region:
    """One passage of a pair's rare shared code: its number in the pair, its
    rare tokens and text lines on each side (b's: the passages of b holding its
    fingerprints; none when only one side's passage is long enough), how many
    sources hold its fingerprints (fewest, most; the pair included) and which
    sources besides the pair hold any of them."""

    number: int
    tokens_a: int
    tokens_b: int
    lines_a: tuple[tuple[int, int], ...]
    lines_b: tuple[tuple[int, int], ...]
    holders: tuple[int, int]
    others: tuple[str, ...] = ()


@dataclass(eq=False)  # identity: the marks are arrays
class Pair:
    """Two sources' shared code in one module, raw and discounted.

    ``share_a`` is the part of a's own code (``own_a`` tokens) in the rare
    shared regions; ``score`` the larger share; ``rare_tokens``, the
    ``expected``/``common``/``short`` tokens (shared code discounted, by why)
    are counted on the side where they are fewer. ``raw_*``: copydetect's
    figures on all shared code but the stubs' and the imports (``raw_shared_tokens``
    on a's side). ``marks_a``/``marks_b``: 3 x N
    (start, end, kind) raw-text spans for the side-by-side view (kinds:
    :data:`MARK_KINDS`, or a region's number when positive)."""

    module: str
    a: str
    b: str
    score: float
    share_a: float
    share_b: float
    rare_tokens: int
    own_a: int
    own_b: int
    expected_tokens: int
    common_tokens: int
    short_tokens: int
    raw_similarity: float
    raw_similarity_a: float
    raw_similarity_b: float
    raw_shared_tokens: int
    flagged: bool = False
    regions: list[Region] = field(default_factory=list)
    marks_a: np.ndarray = field(default_factory=lambda: np.zeros((3, 0), dtype=np.int64))
    marks_b: np.ndarray = field(default_factory=lambda: np.zeros((3, 0), dtype=np.int64))


#: Kinds of discounted shared code in :attr:`Pair.marks_a` (regions are numbered from 1).
SHORT, COMMON, EXPECTED = -1, -2, -3
MARK_KINDS = {SHORT: "short", COMMON: "common", EXPECTED: "expected"}


def _people(sub: Submission) -> str:
    text = "; ".join(p.get("name") or p.get("email") or p.get("sid", "") for p in sub.submitters)
    return "'" + text if text.startswith(("=", "+", "-", "@")) else text  # no spreadsheet formulas


def _read(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return None
    with open(path, "rb") as f:
        return f.read(MAX_FILE_BYTES).decode("utf-8", "replace")


def _own_imports(text: str) -> set[str] | None:
    """The package's own modules ``text`` imports statically (``from . import x``,
    ``from ._x import y``, ``import student.x``...); None when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") if node.module else []
            if node.level == 0:
                if not parts or parts[0] not in ("student", "reference"):
                    continue
                parts = parts[1:]
            elif node.level > 1:
                continue  # above the package
            if parts:
                found.add(parts[0])
            else:  # from . import x, y
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] in ("student", "reference") and len(parts) > 1:
                    found.add(parts[1])
    return found


def module_units(files: dict[str, str]) -> dict[str, str]:
    """Per handout module in ``files`` (module name -> text, every plain module of
    a package), the code importing it runs: the module, then the other modules
    it and ``__init__`` import (transitively, handout modules excepted: each is
    compared as itself), then every helper that no handout module imports
    statically. Each file starts with a ``# student/<name>.py`` line (a comment:
    not compared)."""
    handout = set(HANDOUT_MODULES)
    imports = {name: _own_imports(text) for name, text in files.items()}

    def closure(start: str) -> list[str]:
        seen, todo = [], [start, "__init__"]
        while todo:
            name = todo.pop(0)
            if name in seen or name not in files or (name in handout and name != start):
                continue
            seen.append(name)
            todo += sorted(imports[name] or ())
        return seen

    units = {m: closure(m) for m in HANDOUT_MODULES if m in files}
    reached = {n for names in units.values() for n in names}
    helpers = sorted(n for n in files if n not in handout and n not in reached)
    if any(v is None for v in imports.values()):  # what it imports is unknown: every helper may be
        helpers = sorted(n for n in files if n not in handout)
    return {m: "\n".join(f"# student/{n}.py\n{files[n]}" for n in dict.fromkeys([*names, *helpers]))
            for m, names in units.items()}


def _modules(package: Path) -> dict[str, str]:
    """Every plain module of ``package`` (a staged ``student/``), by name."""
    files = {}
    for path in sorted(package.iterdir()):
        if is_plain_module(path.name) and (text := _read(path)) is not None:
            files[path.name[:-3]] = text
    return files


def stage(root: Path, tmp: Path, exclude: Iterable[Path] = ()) -> list[Source]:
    """The submissions in ``root`` as texts, staged exactly as the batch grades them."""
    sources = []
    for sub in discover(root, exclude=exclude):
        src = Source(sub.id, _people(sub))
        sources.append(src)
        target, _, reason = precheck(sub.path, tmp / "staged" / sub.id)
        if target is None:
            src.skipped = reason
            continue
        try:
            folder = locate(target.resolve(), tmp / "unpacked" / sub.id)
            work = make_working_copy(folder / "student", tmp / "work" / sub.id)
        except (SubmissionError, OSError, zipfile.BadZipFile) as e:
            src.skipped = str(e)
            continue
        src.files = module_units(_modules(work / "student"))
    return sources


def reference_source(repo: Path = REPO) -> Source | None:
    """The reference solutions as a source, where this checkout has them."""
    if not (repo / "reference").is_dir():
        return None
    return Source(REFERENCE_ID, "", module_units(_modules(repo / "reference")))


def library_source() -> Source | None:
    """torch.optim's optimizer sources (read from the installed torch, which is
    not imported) as the ``optimizers`` of one more source; None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    optim = Path(spec.origin).parent / "optim"
    texts = [f"# torch/optim/{path.relative_to(optim)}\n{text}" for path in sorted(optim.rglob("*.py"))
             if path.name not in LIBRARY_SKIPPED and (text := _read(path)) is not None]
    return Source(LIBRARY_ID, "", {"optimizers": "\n".join(texts)}) if texts else None


def correct_solutions(repo: Path = REPO) -> list[Solution]:
    """The reference and every entry of the correct corpus as solutions, with
    their lines; [] without ``reference/`` (a checkout without solutions).
    A ``.toml`` entry is the reference patched; a folder entry is its own
    modules only (what it imports from the reference is the reference's)."""
    if not (repo / "reference").is_dir():
        return []
    reference = _modules(repo / "reference")
    out = [Solution(REFERENCE_ID, REFERENCE_LINE, module_units(reference))]
    lines = correct_lineage()
    for entry in correct_submissions():
        if entry.patches:
            files = dict(reference)
            for file, find, replace in entry.patches:
                files[file.removesuffix(".py")] = files[file.removesuffix(".py")].replace(find, replace, 1)
        else:
            files = {path.stem: text for path in entry.modules if (text := _read(path)) is not None}
        out.append(Solution(entry.name, lines[entry.name], module_units(files)))
    for sol in honest_solutions():
        files = {path.stem: text for path in sol.modules if (text := _read(path)) is not None}
        out.append(Solution(f"{HONEST_PREFIX}{sol.name}", f"{HONEST_PREFIX}{sol.name}", module_units(files)))
    return out


def stubs_of(repo: Path = REPO) -> dict[str, str]:
    """The handout's stubs by module, as :func:`module_units` makes them (each
    stub with the stubs' ``__init__``): their fingerprints never count."""
    return module_units(_modules(repo / "student")) if (repo / "student").is_dir() else {}


def without_imports(text: str) -> str:
    """``text`` with every import statement blanked to spaces (newlines kept,
    so offsets into it are offsets into ``text``); ``text`` itself when Python
    cannot tokenize it. The handout says what to import, and the same imports
    in the same order are no evidence of copying."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):  # IndentationError included
        return text
    starts = np.cumsum([0, *map(len, text.splitlines(keepends=True))])  # offset of each line (1-based rows)
    chars = list(text)
    begin, at_start = None, True
    for tok in tokens:
        if tok.type == tokenize.NEWLINE:  # the end of a logical line
            if begin is not None:
                for i in range(begin, starts[tok.end[0] - 1] + tok.end[1]):
                    if chars[i] != "\n":
                        chars[i] = " "
            begin, at_start = None, True
        elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            if at_start and tok.type == tokenize.NAME and tok.string in ("import", "from"):
                begin = int(starts[tok.start[0] - 1] + tok.start[1])
            at_start = False
    return "".join(chars)


@dataclass(eq=False)
class Unit:
    """One source's code in one module, fingerprinted: ``text`` as the report
    shows it, copydetect's ``fingerprint`` of it with its imports blanked (see
    :func:`without_imports`; the same offsets), and where every k-gram of the
    filtered code starts (``starts``, sorted) with the fingerprint starting
    there (``at``), as arrays for the vectorised lookups below."""

    text: str
    fingerprint: CodeFingerprint
    starts: np.ndarray
    at: np.ndarray

    @property
    def hashes(self) -> set[int]:
        return self.fingerprint.hashes

    @property
    def tokens(self) -> int:
        """Tokens of the filtered code that its fingerprints cover (the stub's code removed)."""
        return int(self.fingerprint.token_coverage)


def _fingerprint(text: str, boilerplate: np.ndarray | None = None) -> Unit:
    from copydetect.detector import CodeFingerprint  # tokenizes with pygments; never imports the code

    fp = CodeFingerprint("unit.py", NOISE, WINDOW, boilerplate=boilerplate, language="python",
                         fp=io.StringIO(without_imports(text)))
    where = sorted((p, h) for h, starts in fp.hash_idx.items() for p in starts)
    return Unit(text, fp, np.array([p for p, _ in where], dtype=np.int64),
                np.array([h for _, h in where], dtype=np.int64))


def _boilerplate(stub: str) -> np.ndarray:
    return np.unique(np.array(sorted(_fingerprint(stub).hashes), dtype=np.int64))


def _prints(texts: dict[str, str], boilerplate: np.ndarray) -> dict[str, Unit]:
    """Each text (by name) with code of its own (not only the stub's, not empty), fingerprinted."""
    prints = {}
    for name, text in texts.items():
        unit = _fingerprint(text, boilerplate)
        if unit.tokens > 0:
            prints[name] = unit
    return prints


@dataclass
class Corpus:
    """The correct solutions, fingerprinted once: per module, each solution's
    fingerprints (``prints``); per line, every fingerprint its solutions hold
    in any module (``lines``: an argument check the contract dictates is
    expected code wherever a student puts it, and a helper module is compared
    with every module that imports it); each solution's line (``line_of``)."""

    prints: dict[str, dict[str, Unit]]
    lines: dict[str, set[int]]
    line_of: dict[str, str]


def fingerprint_corpus(solutions: Sequence[Solution], stubs: dict[str, str]) -> Corpus:
    """:class:`Corpus` of ``solutions`` (each module less its stub)."""
    prints: dict[str, dict[str, Unit]] = {}
    lines: dict[str, set[int]] = {}
    for module in HANDOUT_MODULES:
        prints[module] = _prints({s.name: s.files[module] for s in solutions if module in s.files},
                                 _boilerplate(stubs.get(module, "")))
        for name, unit in prints[module].items():
            lines.setdefault(next(s.line for s in solutions if s.name == name), set()).update(unit.hashes)
    return Corpus(prints, lines, {s.name: s.line for s in solutions})


def expected_code(lines: dict[str, set[int]]) -> frozenset[int]:
    """The fingerprints two or more lines hold: code solutions written apart
    share, so the contract dictates it."""
    seen = Counter(h for hashes in lines.values() for h in hashes)
    return frozenset(h for h, n in seen.items() if n >= 2)


def _origin(line: str) -> str:
    """The source a corpus line counts as when holders are counted (the
    reference's line is the reference itself)."""
    return REFERENCE_ID if line == REFERENCE_LINE else f"corpus: {line}"


class ModuleIndex:
    """One module's fingerprints, ready to score pairs: each source's, the
    expected code, and how many sources hold each fingerprint (the class's
    sources plus the corpus's lines, the reference's line being the
    reference; ``origins``: each one's fingerprints). ``own[id]``: the tokens
    of a source's code that count (less the expected and the common code)."""

    def __init__(self, module: str, prints: dict[str, Unit], lines: dict[str, set[int]],
                 settings: Settings) -> None:
        self.module = module
        self.prints = prints
        self.settings = settings
        self.expected = expected_code(lines)
        origins: dict[str, set[int]] = {sid: set(u.hashes) for sid, u in prints.items()}
        for line, hashes in lines.items():
            origins.setdefault(_origin(line), set()).update(hashes)
        self.origins = origins
        self.holders = Counter(h for hashes in origins.values() for h in hashes)
        self.common = frozenset(h for h, n in self.holders.items() if n > settings.max_holders)
        self.own = {sid: _coverage(u, u.hashes - self.expected - self.common) for sid, u in prints.items()}


def _positions(unit: Unit, hashes: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    """Where ``hashes`` start in ``unit``'s filtered code (sorted), and which starts at each."""
    mask = np.isin(unit.at, np.fromiter(hashes, dtype=np.int64))
    return unit.starts[mask], unit.at[mask]


def _runs(positions: np.ndarray) -> np.ndarray:
    """2 x N (start, end) filtered offsets of the runs the k-grams at ``positions`` (sorted) cover."""
    from copydetect.utils import get_copied_slices

    return np.asarray(get_copied_slices(positions, NOISE), dtype=np.int64).reshape(2, -1)


def _covered(unit: Unit, starts: np.ndarray) -> np.ndarray:
    """covered[i]: how many tokens before filtered offset i the k-grams at
    ``starts`` cover (copydetect's get_token_coverage as a running count, and
    vectorised: it is asked for every pair)."""
    edges = np.zeros(len(unit.fingerprint.filtered_code) + NOISE + 1, dtype=np.int64)
    np.add.at(edges, starts, 1)
    np.add.at(edges, starts + NOISE, -1)
    return np.r_[0, np.cumsum(np.cumsum(edges) > 0)]


def _coverage(unit: Unit, hashes: set[int]) -> int:
    """Tokens of ``unit``'s filtered code that the k-grams of ``hashes`` cover."""
    return int(_covered(unit, _positions(unit, hashes)[0])[-1]) if hashes else 0


def _raw(unit: Unit, offsets: np.ndarray) -> np.ndarray:
    """Filtered-code offsets as offsets in the raw text (what copydetect's
    compare_files does to its slices, for any array of offsets)."""
    out = np.array(offsets, dtype=np.int64)
    table = np.asarray(unit.fingerprint.offsets)
    if len(table) and out.size:
        out = out + table[:, 1][np.clip(np.searchsorted(table[:, 0], out), 0, len(table) - 1)]
    return out


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, max(int(offset), 0)) + 1


@dataclass
class _Side:
    """One side of a pair: its shared passages (runs of all the code the two
    share), the rare code each holds, and where each rare fingerprint starts."""

    unit: Unit
    runs: np.ndarray  # 2 x N filtered offsets
    lengths: np.ndarray
    rare: np.ndarray  # rare tokens per run
    counted: np.ndarray  # per run: a region (long enough, some rare code)
    rare_starts: np.ndarray  # sorted filtered offsets where rare fingerprints start
    rare_hashes: np.ndarray  # the fingerprint starting at each
    run_of: np.ndarray  # the run each rare start lies in


def _side(unit: Unit, shared: set[int], rare: set[int], settings: Settings) -> _Side:
    """Passages are runs of all shared code, so that expected code inside a
    copied passage does not cut it into pieces too short to count; each counts
    for its rare code only."""
    runs = _runs(_positions(unit, shared)[0])
    starts, hashes = _positions(unit, rare)
    covered = _covered(unit, starts)
    rare_tokens = covered[runs[1]] - covered[runs[0]]
    lengths = runs[1] - runs[0]
    run_of = np.searchsorted(runs[0], starts, side="right") - 1
    return _Side(unit, runs, lengths, rare_tokens, (lengths >= settings.min_region) & (rare_tokens > 0),
                 starts, hashes, run_of)


def _spans(unit: Unit, starts: np.ndarray) -> np.ndarray:
    """2 x N raw-text spans of the runs of the k-grams starting at ``starts``."""
    return _raw(unit, _runs(np.sort(starts)))


def score_pair(index: ModuleIndex, a: str, b: str, *, detail: bool = False) -> Pair | None:
    """The pair (a, b) in ``index``'s module; None when they share no code.
    With ``detail`` (or when it is flagged), its regions and marks for the
    side-by-side view too."""
    fa, fb = index.prints[a], index.prints[b]
    shared = fa.hashes & fb.hashes
    if not shared:
        return None
    expected = shared & index.expected
    common = (shared - expected) & index.common
    rare = shared - expected - common
    s = index.settings
    sa, sb = _side(fa, shared, rare, s), _side(fb, shared, rare, s)
    # copydetect's compare_files figures: the shared runs' tokens over each side's fingerprinted tokens
    raw_tokens = int(sa.lengths.sum())
    raw_a = min(raw_tokens / fa.tokens, 1.0)
    raw_b = min(int(sb.lengths.sum()) / fb.tokens, 1.0)
    counted_a, counted_b = int(sa.rare[sa.counted].sum()), int(sb.rare[sb.counted].sum())
    share_a = min(counted_a / index.own[a], 1.0) if index.own[a] else 0.0
    share_b = min(counted_b / index.own[b], 1.0) if index.own[b] else 0.0
    score, rare_tokens = max(share_a, share_b), min(counted_a, counted_b)
    pair = Pair(index.module, a, b, score, share_a, share_b, rare_tokens, index.own[a], index.own[b],
                min(_coverage(fa, expected), _coverage(fb, expected)),
                min(_coverage(fa, common), _coverage(fb, common)),
                min(int(sa.rare[~sa.counted].sum()), int(sb.rare[~sb.counted].sum())),
                max(raw_a, raw_b), raw_a, raw_b, int(raw_tokens), s.flags(score, rare_tokens, index.module))
    if detail or pair.flagged:
        _detail(pair, index, sa, sb, expected, common)
    return pair


def _detail(pair: Pair, index: ModuleIndex, sa: _Side, sb: _Side, expected: set[int], common: set[int]) -> None:
    """Number the pair's regions (a's counted runs in order; b's counted runs
    take the number of the first a-region whose rare fingerprints they hold;
    one of b's counted runs no a-region reaches is a region of its own), and
    lay out the marks of both sides."""
    numbers_a = np.zeros(sa.runs.shape[1], dtype=np.int64)
    numbers_b = np.zeros(sb.runs.shape[1], dtype=np.int64)
    runs_of_hash_b: dict[int, set[int]] = {}
    for h, r in zip(sb.rare_hashes.tolist(), sb.run_of.tolist(), strict=True):
        runs_of_hash_b.setdefault(h, set()).add(r)
    text_a, text_b = sa.unit.text, sb.unit.text
    raw_a, raw_b = _raw(sa.unit, sa.runs), _raw(sb.unit, sb.runs)

    def lines(text: str, raw: np.ndarray, runs: Sequence[int]) -> tuple[tuple[int, int], ...]:
        return tuple((_line_of(text, raw[0][r]), _line_of(text, raw[1][r] - 1)) for r in runs)

    def region(number: int, hashes: set[int], runs_a: list[int], runs_b: list[int]) -> Region:
        held = [index.holders[h] for h in hashes]
        others = () if max(held) <= 2 else tuple(sorted(o for o, mine in index.origins.items()
                                                        if o not in (pair.a, pair.b) and not mine.isdisjoint(hashes)))
        return Region(number, int(sa.rare[runs_a].sum()), int(sb.rare[runs_b].sum()), lines(text_a, raw_a, runs_a),
                      lines(text_b, raw_b, runs_b), (min(held), max(held)), others)

    number = 0
    for i in np.flatnonzero(sa.counted).tolist():
        hashes = set(sa.rare_hashes[sa.run_of == i].tolist())
        runs_b = sorted({r for h in hashes for r in runs_of_hash_b.get(h, ()) if sb.counted[r]})
        number += 1
        numbers_a[i] = number
        numbers_b[[r for r in runs_b if not numbers_b[r]]] = number  # a b-passage keeps its first number
        pair.regions.append(region(number, hashes, [i], runs_b))
    for i in np.flatnonzero(sb.counted & (numbers_b == 0)).tolist():  # a region in b only: a's runs too short
        number += 1
        numbers_b[i] = number
        pair.regions.append(region(number, set(sb.rare_hashes[sb.run_of == i].tolist()), [], [i]))

    def marks(side: _Side, numbers: np.ndarray) -> np.ndarray:
        label = np.where(side.counted, numbers, SHORT)[side.run_of] if side.run_of.size else side.run_of
        spans = []
        for kind, starts in [*((k, side.rare_starts[label == k]) for k in np.unique(label).tolist()),
                             (COMMON, _positions(side.unit, common)[0]),
                             (EXPECTED, _positions(side.unit, expected)[0])]:
            sp = _spans(side.unit, starts)
            spans.append(np.vstack([sp, np.full((1, sp.shape[1]), kind, dtype=np.int64)]))
        return np.concatenate(spans, axis=1)

    pair.marks_a = marks(sa, numbers_a)
    pair.marks_b = marks(sb, numbers_b)


def module_index(module: str, sources: Sequence[Source], stub: str, corpus: Corpus,
                 settings: Settings) -> ModuleIndex:
    """The :class:`ModuleIndex` of ``sources`` in ``module``."""
    prints = _prints({s.id: s.files[module] for s in sources if module in s.files}, _boilerplate(stub))
    return ModuleIndex(module, prints, corpus.lines, settings)


def _ranked(pairs: list[Pair]) -> list[Pair]:
    pairs.sort(key=lambda p: (not p.flagged, -p.score, -p.rare_tokens, -p.raw_similarity, p.module, p.a, p.b))
    return pairs


def module_pairs(index: ModuleIndex) -> list[Pair]:
    """Every pair of ``index``'s sources that shares code."""
    ids = list(index.prints)
    return [p for i, a in enumerate(ids) for b in ids[i + 1:] if (p := score_pair(index, a, b)) is not None]


def compare(sources: Sequence[Source], stubs: dict[str, str], corpus: Corpus | None = None,
            settings: Settings = Settings()) -> list[Pair]:
    """Every pair of ``sources`` sharing code, over all handout modules (one
    module at a time: only one module's fingerprints are held at once):
    flagged ones first, then by score. ``corpus`` gives the expected code."""
    corpus = corpus or Corpus({}, {}, {})
    return _ranked([p for m in HANDOUT_MODULES for p in module_pairs(module_index(m, sources, stubs.get(m, ""),
                                                                                 corpus, settings))])


@dataclass
class HonestPair:
    """Two complete solutions written apart (the lines ``a`` and ``b``), scored
    per module as a class of two whose own lines are left out of the expected
    code, as students whose styles the corpus has never seen."""

    a: str
    b: str
    modules: dict[str, Pair]  # the modules where they share any code


def complete_lines(corpus: Corpus) -> dict[str, dict[str, str]]:
    """The corpus's lines that solve every handout module but the reference's
    (each written apart from it and from each other): line -> module -> the
    solution holding that module."""
    cover: dict[str, dict[str, str]] = {}
    for module, prints in corpus.prints.items():
        for name in prints:
            cover.setdefault(corpus.line_of.get(name, name), {}).setdefault(module, name)
    return {line: held for line, held in sorted(cover.items())
            if line != REFERENCE_LINE and set(held) >= set(HANDOUT_MODULES)}


def honest_pairs(corpus: Corpus, settings: Settings = Settings()) -> list[HonestPair]:
    """Every two complete lines (:func:`complete_lines`), scored per module with
    the expected code of the other lines only."""
    lines = complete_lines(corpus)
    out = []
    for i, a in enumerate(lines):
        for b in list(lines)[i + 1:]:
            others = {line: hashes for line, hashes in corpus.lines.items() if line not in (a, b)}
            modules = {}
            for module in HANDOUT_MODULES:
                na, nb = lines[a][module], lines[b][module]
                ua, ub = corpus.prints[module][na], corpus.prints[module][nb]
                # Only the pair's fingerprints are ever looked up: the other lines cut to them
                # give the same expected and common code, and cost a few percent of the whole.
                relevant = ua.hashes | ub.hashes
                index = ModuleIndex(module, {na: ua, nb: ub},
                                    {line: hashes & relevant for line, hashes in others.items()}, settings)
                if (pair := score_pair(index, na, nb)) is not None:
                    modules[module] = pair
            out.append(HonestPair(a, b, modules))
    return out


def whole_score(modules: Iterable[Pair]) -> tuple[float, int]:
    """One pair's modules taken together: (the larger share of either side's own
    code, over the modules where they share any, in rare shared regions; the
    rare shared tokens). A copy spread over every module, each a little
    changed, stands out here where no single module does."""
    pairs = list(modules)
    own_a, own_b = sum(p.own_a for p in pairs), sum(p.own_b for p in pairs)
    counted_a, counted_b = sum(p.share_a * p.own_a for p in pairs), sum(p.share_b * p.own_b for p in pairs)
    score = max(counted_a / own_a if own_a else 0.0, counted_b / own_b if own_b else 0.0)
    return min(score, 1.0), sum(p.rare_tokens for p in pairs)


def judged_by(pairs: Sequence[HonestPair], settings: Settings, without: Iterable[str] = ()) -> Settings:
    """``settings`` with the thresholds the honest ``pairs`` (those holding no
    line of ``without``) measure: each module's is the highest score of an
    honest pair there plus ``settings.margin``, and so is the whole threshold
    (over :func:`whole_score`); none below ``settings.threshold``."""
    left_out = set(without)
    kept = [hp for hp in pairs if hp.a not in left_out and hp.b not in left_out]

    def above(highest: float) -> float:
        return round(max(settings.threshold, highest + settings.margin), 3)

    modules = tuple((m, above(max((hp.modules[m].score for hp in kept if m in hp.modules), default=0.0)))
                    for m in HANDOUT_MODULES)
    whole = above(max((whole_score(hp.modules.values())[0] for hp in kept), default=0.0))
    return replace(settings, thresholds=modules, whole_threshold=whole)


@dataclass
class Calibration:
    """The honest pairs of the complete solutions (:func:`honest_pairs`), and
    how the thresholds judge them. The false-flag rate is measured as a
    class would meet a new pair: each pair is judged by thresholds measured
    without either of its solutions (``judged``: its modules' threshold)."""

    pairs: list[HonestPair]
    settings: Settings
    judged: dict[tuple[str, str], Settings] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for hp in self.pairs:
            self.judged[(hp.a, hp.b)] = judged_by(self.pairs, self.settings, (hp.a, hp.b))

    @property
    def lines(self) -> set[str]:
        """The complete solutions (lines) the pairs are made of."""
        return {line for hp in self.pairs for line in (hp.a, hp.b)}

    @property
    def solutions(self) -> int:
        return len(self.lines)

    def flagged_modules(self, hp: HonestPair) -> list[str]:
        """The modules where ``hp`` would be flagged, by thresholds measured
        without it (``"all modules"`` when its modules together would be)."""
        judge = self.judged[(hp.a, hp.b)]
        found = [m for m, p in hp.modules.items() if judge.flags(p.score, p.rare_tokens, m)]
        return found + (["all modules"] if judge.flags_whole(*whole_score(hp.modules.values())) else [])

    @property
    def flagged(self) -> list[HonestPair]:
        return [hp for hp in self.pairs if self.flagged_modules(hp)]

    def summary(self) -> str:
        """One sentence: the measured false-flag rate, on how many solutions."""
        if not self.pairs:
            return ("No false-flag rate measured (this checkout holds fewer than two complete solutions written "
                    "apart): the module thresholds are the default.")
        flagged, lines = self.flagged, self.lines
        honest = sum(line.startswith(HONEST_PREFIX) for line in lines)
        return (f"False-flag rate measured on {self.solutions} complete solutions written independently from the "
                f"handout ({honest} in grader/corpus/honest, {len(lines) - honest} in grader/corpus/correct): "
                f"{len(flagged)} of {len(self.pairs)} honest pairs flagged "
                f"({len(flagged) / len(self.pairs):.0%}), each pair judged by thresholds measured without it.")


def calibrate(corpus: Corpus, settings: Settings = Settings()) -> tuple[Calibration, Settings]:
    """The honest pairs of ``corpus`` and the settings whose module thresholds
    they measured (the honest highest plus the margin)."""
    pairs = honest_pairs(corpus, settings)
    return Calibration(pairs, settings), judged_by(pairs, settings)


@dataclass
class Verdict:
    """One pair of sources over every module: the modules that decided its flag
    (``decided``: flagged there), its module pairs, its highest score."""

    a: str
    b: str
    modules: list[Pair]
    decided: list[Pair]
    whole: tuple[float, int]  # :func:`whole_score` of its modules
    whole_flagged: bool  # flagged on its modules taken together

    @property
    def flagged(self) -> bool:
        return bool(self.decided) or self.whole_flagged

    @property
    def score(self) -> float:
        return max(p.score for p in self.modules)

    def evidence(self, settings: Settings) -> str:
        """What decided it, in one line: its modules together when they decided
        it, each deciding module's score against its threshold and its rare
        shared code; else its highest module."""
        shown = self.decided or ([] if self.whole_flagged else [max(self.modules, key=lambda p: p.score)])
        parts = [f"{p.module} {p.score:.0%} (threshold {settings.threshold_of(p.module):.0%}), "
                 f"{p.rare_tokens} rare tokens" for p in shown]
        if self.whole_flagged:
            parts.insert(0, f"all modules {self.whole[0]:.0%} (threshold {settings.whole_threshold:.0%}), "
                            f"{self.whole[1]} rare tokens")
        return "; ".join(parts)


def pair_verdicts(pairs: Sequence[Pair], settings: Settings) -> list[Verdict]:
    """The module pairs grouped by pair of sources: flagged pairs first (most
    deciding modules, then highest score), then by highest score."""
    grouped: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        grouped.setdefault((p.a, p.b) if p.a < p.b else (p.b, p.a), []).append(p)
    verdicts = []
    for (a, b), ps in grouped.items():
        whole = whole_score(ps)
        verdicts.append(Verdict(a, b, ps, [p for p in ps if p.flagged], whole, settings.flags_whole(*whole)))
    return sorted(verdicts, key=lambda v: (not v.flagged, -len(v.decided), -v.score, v.a, v.b))


# ------------------------------------------------------------------ outputs


def pairs_csv(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings = Settings()) -> str:
    """``pairs.csv``: every module pair sharing code, ranked (columns: :data:`PAIR_COLUMNS`;
    ``threshold``: its module's)."""
    who = {s.id: s.submitters for s in sources}
    return csv_text(PAIR_COLUMNS, ([rank, p.module, p.a, p.b, f"{p.score:.3f}",
                                    f"{settings.threshold_of(p.module):.3f}", int(p.flagged), f"{p.share_a:.3f}",
                                    f"{p.share_b:.3f}", p.rare_tokens, p.own_a, p.own_b,
                                    p.expected_tokens, p.common_tokens, p.short_tokens, f"{p.raw_similarity:.3f}",
                                    f"{p.raw_similarity_a:.3f}", f"{p.raw_similarity_b:.3f}", p.raw_shared_tokens,
                                    who.get(p.a, ""), who.get(p.b, "")] for rank, p in enumerate(pairs, 1)))


def pair_summary_csv(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings = Settings()) -> str:
    """``pair_summary.csv``: one row per pair of sources sharing code, as
    :func:`pair_verdicts` ranks them (columns: :data:`PAIR_SUMMARY_COLUMNS`;
    ``score``: its highest module's; ``decided_by``: the modules that flagged it,
    and "all modules" when they did together)."""
    who = {s.id: s.submitters for s in sources}
    rows = []
    for rank, v in enumerate(pair_verdicts(pairs, settings), 1):
        decided = [p.module for p in v.decided] + (["all modules"] if v.whole_flagged else [])
        rows.append([rank, v.a, v.b, int(v.flagged), f"{v.score:.3f}", "; ".join(decided), f"{v.whole[0]:.3f}",
                     v.whole[1], v.evidence(settings), who.get(v.a, ""), who.get(v.b, "")])
    return csv_text(PAIR_SUMMARY_COLUMNS, rows)


def submissions_csv(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings = Settings()) -> str:
    """``similarity.csv``: one row per submission (columns: :data:`SUBMISSION_COLUMNS`;
    ``flagged_with``: the sources of its flagged pairs, :func:`pair_verdicts`)."""
    verdicts = [v for v in pair_verdicts(pairs, settings) if v.flagged]
    rows = []
    for s in sources:
        if s.id in (REFERENCE_ID, LIBRARY_ID):
            continue
        mine = [p for p in pairs if s.id in (p.a, p.b)]  # ranked: the first is the most suspicious
        best = mine[0] if mine else None
        ref = max((p.score for p in mine if REFERENCE_ID in (p.a, p.b)), default=0.0)
        lib = max((p.score for p in mine if LIBRARY_ID in (p.a, p.b)), default=0.0)
        with_whom = sorted({v.b if v.a == s.id else v.a for v in verdicts if s.id in (v.a, v.b)})
        rows.append([s.id, s.submitters, f"{best.score:.3f}" if best else "0.000",
                     "" if best is None else (best.b if best.a == s.id else best.a), best.module if best else "",
                     best.rare_tokens if best else 0, f"{ref:.3f}", f"{lib:.3f}", int(bool(with_whom)),
                     "; ".join(with_whom), f"{max((p.raw_similarity for p in mine), default=0.0):.3f}", s.skipped])
    return csv_text(SUBMISSION_COLUMNS, rows)


def calibration_csv(calibration: Calibration) -> str:
    """``calibration.csv``: every honest pair's module scores, with the
    threshold that judged it (measured without the pair) and whether it flagged."""
    rows = []
    for hp in calibration.pairs:
        judge, flagged = calibration.judged[(hp.a, hp.b)], set(calibration.flagged_modules(hp))
        rows += [[m, hp.a, hp.b, f"{p.score:.3f}", p.rare_tokens, f"{judge.threshold_of(m):.3f}",
                  int(m in flagged), f"{p.raw_similarity:.3f}"] for m, p in hp.modules.items()]
        score, rare = whole_score(hp.modules.values())
        rows.append(["all modules", hp.a, hp.b, f"{score:.3f}", rare, f"{judge.whole_threshold:.3f}",
                     int("all modules" in flagged), ""])
    return csv_text(CALIBRATION_COLUMNS, rows)


def _marked(text: str, marks: np.ndarray) -> str:
    """``text`` escaped, its marked spans (3 x N: start, end, kind) wrapped:
    counted regions in <mark> with their number, discounted shared code in a
    <span> of its kind. Where spans overlap, a counted region wins, then short,
    common and expected code."""
    kind = np.zeros(len(text), dtype=np.int64)
    order = np.argsort(marks[2], kind="stable") if marks.size else np.zeros(0, dtype=np.int64)
    for start, end, k in marks[:, order].T.tolist() if marks.size else ():
        kind[max(start, 0):max(end, 0)] = k  # expected (-3) first, regions (> 0) last
    out, pos = [], 0
    for end in [*np.flatnonzero(np.diff(kind)) + 1, len(text)]:
        chunk, k = html.escape(text[pos:end]), int(kind[pos]) if pos < len(text) else 0
        if k > 0:
            out.append(f'<mark title="region {k}"><b>[{k}]</b>{chunk}</mark>')
        elif k < 0:
            out.append(f'<span class="{MARK_KINDS[k]}">{chunk}</span>')
        else:
            out.append(chunk)
        pos = end
    return "".join(out)


_STYLE = """body{font-family:sans-serif;margin:1em;max-width:110em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.pair{display:flex;gap:1em}
.pair>div{flex:1;min-width:0}pre{background:#f6f6f6;padding:.5em;font-size:12px;white-space:pre-wrap;
overflow-wrap:anywhere}
mark{background:#ffd27f}mark b{color:#a40;font-size:10px}.expected{background:#dde8f5;color:#456}
.common{background:#e6e6e6;color:#555}.short{text-decoration:underline dotted #a40}"""


def _header(sources: Sequence[Source], settings: Settings, calibration: Calibration | None) -> str:
    e = html.escape
    n = sum(s.id not in (REFERENCE_ID, LIBRARY_ID) for s in sources)
    extra = ((" and the reference" if any(s.id == REFERENCE_ID for s in sources) else "")
             + (f" and {e(LIBRARY_ID)} (optimizers)" if any(s.id == LIBRARY_ID for s in sources) else ""))
    return (
        f"<p>{n} submissions{extra}; modules: {e(', '.join(HANDOUT_MODULES))}, each with the modules of its "
        "package it imports. Code is compared as tokens: names, comments, docstrings and layout do not hide a "
        "copy.</p><p><b>What counts</b> is rare shared code: what the two share in passages of at least "
        f"{settings.min_region} tokens, less the stubs' code and import statements, less <i>expected code</i> "
        "(what two correct solutions written apart hold, the reference and the project's correct corpus: code "
        f"the contract dictates), less <i>common code</i> (what more than {settings.max_holders} sources hold). "
        "A pair's <b>score</b> in a module is the larger share of either side's own code (its code less the "
        "stubs', expected and common code) in those passages. <b>Flagged</b>: a module whose score is above what "
        "honest solutions reach there (each module's threshold is the highest score of an honest pair in it plus "
        f"{settings.margin:.0%}, at least {settings.threshold:.0%}: "
        + e(", ".join(f"{m} {settings.threshold_of(m):.0%}" for m in HANDOUT_MODULES))
        + f"), with at least {settings.min_tokens} rare shared tokens (about {settings.min_tokens // 30} lines); "
        f"or whose modules together share more than honest solutions do ({settings.whole_threshold:.0%} of either "
        "side's own code over the modules they share code in: a copy spread thin over every module). "
        "Short modules whose honest solutions converge flag less: the class's size does not matter, as the "
        "thresholds come from the honest solutions, not from the class.</p>"
        f"<p>{e(calibration.summary()) if calibration else 'False-flag rate not measured.'} "
        "calibration.csv lists their module scores and the threshold that judged each.</p>"
        "<p><b>A flag means</b> that two submissions share more code than the project has seen honest solutions "
        "share: a reason to read the marked regions side by side. <b>It does not mean</b> that either copied, "
        "nor which one: students may have worked together as allowed, used the same outside source, or one "
        "may have copied the other without the other's knowledge. <b>No flag does not mean no copying</b>: "
        "code rewritten statement by statement is not found.</p>"
        '<p>Marks: <mark><b>[n]</b>rare shared region n</mark> <span class="short">shared, shorter than a '
        'region</span> <span class="common">shared, common in the class</span> <span class="expected">shared, '
        "expected code</span></p>")


def _pair_section(i: int, p: Pair, texts: dict[tuple[str, str], str], settings: Settings) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{r.number}</td><td>{_lines(r.lines_a)}</td><td>{_lines(r.lines_b)}</td>"
        f"<td>{r.tokens_a} / {r.tokens_b}</td><td>{_held(r)}</td></tr>" for r in p.regions)
    return (
        f'<h2 id="pair-{i}">#{i} {e(p.module)}: {e(p.a)} and {e(p.b)} (score {p.score:.0%})</h2>'
        f"<p>Rare shared code: {p.rare_tokens} tokens in {len(p.regions)} regions, {p.share_a:.0%} of "
        f"{e(p.a)}'s own code ({p.own_a} tokens) and {p.share_b:.0%} of {e(p.b)}'s ({p.own_b} tokens). "
        f"<b>Discounted</b>: {p.expected_tokens} tokens of expected code (two correct solutions written apart "
        f"hold it), {p.common_tokens} of common code (more than {settings.max_holders} sources hold it), "
        f"{p.short_tokens} in shared passages shorter than {settings.min_region} tokens. Raw similarity (all "
        f"shared code but the stubs' and the imports, as copydetect counts it): {p.raw_similarity:.0%}.</p>"
        "<table><tr><th>region</th><th>lines in a</th><th>lines in b</th><th>rare tokens a / b</th>"
        f"<th>held by (sources)</th></tr>{rows}</table>"
        f'<div class="pair"><div><h3>a: {e(p.a)}</h3><pre>{_marked(texts.get((p.a, p.module), ""), p.marks_a)}'
        f'</pre></div><div><h3>b: {e(p.b)}</h3><pre>{_marked(texts.get((p.b, p.module), ""), p.marks_b)}'
        "</pre></div></div>")


def _lines(spans: tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"{low}-{high}" if high != low else f"{low}" for low, high in spans)


def _held(r: Region) -> str:
    """Who holds a region's fingerprints: the pair only, or how many others and which (escaped)."""
    if r.holders[1] <= 2:
        return "these two only"
    shown = ", ".join(html.escape(o) for o in r.others[:3]) + (f" and {len(r.others) - 3} more" if len(r.others) > 3
                                                              else "")
    return f"these two and {len(r.others)} more: {shown}"


def report_html(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings, top: int,
                calibration: Calibration | None = None) -> str:
    """The report page. Every string from a submission goes through html.escape."""
    e = html.escape
    texts = {(s.id, m): t for s in sources for m, t in s.files.items()}
    shown = [p for p in pairs if p.flagged][:top]
    skipped = [s for s in sources if s.skipped]
    rows = "".join(
        f"<tr><td>{i}</td><td>{e(p.module)}</td><td>{e(p.a)}</td><td>{e(p.b)}</td>"
        f"<td>{p.score:.0%}</td><td>{p.share_a:.0%} / {p.share_b:.0%}</td>"
        f"<td>{p.rare_tokens}</td><td>{p.expected_tokens} / {p.common_tokens} / "
        f"{p.short_tokens}</td><td>{p.raw_similarity:.0%}</td><td>"
        + (f'<a href="#pair-{i}">side by side</a>' if p in shown else "")
        + "</td></tr>" for i, p in enumerate(pairs[: max(top, len(shown))], 1))
    parts = [
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">",
        # No script of any origin may run here, whatever a submission's text holds.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'none'\">",
        f"<title>Similarity report</title><style>{_STYLE}</style></head><body>",
        "<h1>Similarity report</h1>", _header(sources, settings, calibration),
    ]
    if skipped:
        parts.append("<h2>Skipped</h2><ul>" + "".join(f"<li>{e(s.id)}: {e(s.skipped)}</li>" for s in skipped)
                     + "</ul>")
    verdicts = pair_verdicts(pairs, settings)
    decided = sum(v.flagged for v in verdicts)
    lead = "".join(
        f"<tr><td>{e(v.a)}</td><td>{e(v.b)}</td><td>{'flagged' if v.flagged else ''}</td><td>{v.score:.0%}</td>"
        f"<td>{e(v.evidence(settings))}</td></tr>" for v in verdicts[: max(top, decided)])
    parts.append(f"<h2>Pairs of submissions: {decided} flagged</h2>"
                 "<p>One row per pair: its highest module score, and what decided its flag (each module above its "
                 "threshold, or all modules together), else its highest module. A flag asks a person to read the "
                 "two side by side below; it is not a finding.</p>"
                 "<table><tr><th>a</th><th>b</th><th></th><th>score</th><th>evidence</th></tr>" + lead + "</table>")
    parts.append(f"<h2>Module pairs: {len(shown)} flagged, then the rest by score</h2><table><tr><th>#</th><th>module"
                 "</th><th>a</th><th>b</th><th>score</th><th>share a / b</th><th>rare tokens</th>"
                 "<th>discounted: expected / common / short</th><th>raw</th><th></th></tr>" + rows + "</table>")
    for i, p in enumerate(pairs, 1):
        if p in shown:
            parts.append(_pair_section(i, p, texts, settings))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def report(root: Path, out: Path, *, exclude: Iterable[Path] = (), with_reference: bool = True,
           with_library: bool = True, settings: Settings = Settings(), top: int = 100,
           solutions: Sequence[Solution] | None = None, quiet: bool = False) -> list[Pair]:
    """Stage the submissions in ``root``, compare them, write DIR's five files.
    ``solutions``: the correct solutions whose shared code is expected
    (default: :func:`correct_solutions`)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="similarity-") as tmp:
        root = root.resolve()
        if root.is_file() and zipfile.is_zipfile(root):
            root = unpack_export(root, Path(tmp) / "export")
        if not root.is_dir():
            raise SystemExit(f"similarity: {root} is not a folder (nor an export zip)")
        sources = stage(root, Path(tmp), exclude=[out, *exclude])
    ref = reference_source() if with_reference else None
    lib = library_source() if with_library else None
    everything = [*sources, *(s for s in (ref, lib) if s is not None)]
    stubs = stubs_of()
    corpus = fingerprint_corpus(correct_solutions() if solutions is None else solutions, stubs)
    calibration, settings = calibrate(corpus, settings)  # the module thresholds, before any flag
    pairs: list[Pair] = []
    for module in HANDOUT_MODULES:  # one module's fingerprints held at a time
        pairs += module_pairs(module_index(module, everything, stubs.get(module, ""), corpus, settings))
    pairs = _ranked(pairs)
    write_atomic(out / "pair_summary.csv", pair_summary_csv(pairs, everything, settings))
    write_atomic(out / "pairs.csv", pairs_csv(pairs, everything, settings))
    write_atomic(out / "similarity.csv", submissions_csv(pairs, everything, settings))
    write_atomic(out / "calibration.csv", calibration_csv(calibration))
    write_atomic(out / "report.html", report_html(pairs, everything, settings, top, calibration))
    if not quiet:
        verdicts = pair_verdicts(pairs, settings)
        flagged = [v for v in verdicts if v.flagged]
        print(f"similarity: {len(sources)} submissions, {len(verdicts)} pairs sharing code, {len(flagged)} flagged "
              f"(a module's score above what honest solutions reach there, with >= {settings.min_tokens} rare "
              f"tokens); a flag asks a person to look, it is not a finding; report in {out / 'report.html'}\n"
              f"  {calibration.summary()}")
        for v in flagged[:10]:
            print(f"  {v.a}  {v.b}: {v.evidence(settings)}")
    return pairs


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m grader similarity``."""
    p = argparse.ArgumentParser(prog="python -m grader similarity", description=__doc__.split("\n\n")[0])
    p.add_argument("submissions", type=Path, help="folder of submissions (or an export zip), as for batch")
    p.add_argument("--out", type=Path, default=Path("similarity-out"), help="output folder")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help=f"the least threshold of any module, 0..1 (default: {THRESHOLD}); each module's is the "
                        f"highest score of an honest pair there plus {MARGIN}, at least this")
    p.add_argument("--min-tokens", type=int, default=MIN_TOKENS,
                   help=f"and whose rare shared code holds at least this many tokens (default: {MIN_TOKENS})")
    p.add_argument("--max-holders", type=int, default=MAX_HOLDERS,
                   help=f"code held by more than this many sources is common, never counted (default: "
                        f"{MAX_HOLDERS}, as MOSS's -m)")
    p.add_argument("--top", type=int, default=100, help="pairs listed in the report (default: 100)")
    p.add_argument("--no-reference", action="store_true", help="do not compare with reference/")
    p.add_argument("--no-library", action="store_true", help="do not compare optimizers with torch.optim's sources")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m grader similarity``."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if not args.submissions.exists():
        parser.error(f"{args.submissions} does not exist")
    if not 0 <= args.threshold <= 1:
        parser.error("--threshold is a fraction between 0 and 1")
    if args.min_tokens < 0 or args.max_holders < 2:
        parser.error("--min-tokens is at least 0 and --max-holders at least 2 (a pair holds its own code)")
    settings = Settings(threshold=args.threshold, min_tokens=args.min_tokens, max_holders=args.max_holders)
    report(args.submissions, args.out.resolve(), with_reference=not args.no_reference,
           with_library=not args.no_library, settings=settings, top=args.top, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
