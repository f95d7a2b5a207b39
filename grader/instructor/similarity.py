"""Class similarity report: ``python -m grader similarity SUBMISSIONS_DIR --out DIR``.

Pairs of submissions ranked by how much code they share, per handout module,
for instructors who check for copied work (as Gradescope's similarity or MOSS
do). Also run by ``python -m grader batch ... --similarity`` on the batch's
submissions (into ``OUT/similarity``).

Contract:

* The submissions are found, prechecked and staged by the very functions the
  batch and the grader use (:func:`grader.instructor.discovery.discover`,
  :func:`grader.instructor.precheck.precheck`, :func:`grader.sandbox.submission.locate`,
  :func:`grader.sandbox.workcopy.make_working_copy`): regular files only (symlinks and
  special files are never followed), the same caps. A submission that cannot
  be graded is listed as skipped, with the reason.
* Submission code is never imported or run: it is read as text (undecodable
  bytes replaced) and tokenized by copydetect (pygments' lexer; winnowed
  k-gram fingerprints, with identifiers, function names and string literals
  replaced by placeholders, so renaming variables does not hide a copy).
* A module is compared with all the code its import would run: per handout
  module, ``student/<module>.py`` followed by every other module of
  ``student/`` it imports, directly or not, and ``student/__init__.py`` (which
  runs first) with what it imports (:func:`module_units`); a helper no handout
  module imports statically (it may be imported by name) is added to every
  handout module. So a copy moved into ``student/_impl.py`` counts where it is
  used. (Staging refuses anything in ``student/`` but plain modules.)
* torch.optim's own sources (its optimizer modules, read from the installed
  torch, never imported) are one more source for ``optimizers``, named
  ``torch.optim (library)``: a submission that copies torch's optimizers instead
  of delegating to them shows up paired with it.
* The stubs (``student/<module>.py``, with the stubs' ``__init__.py``) are
  boilerplate: every fingerprint of a stub is removed before comparing, so the
  handout's signatures and docstrings never count. Nor do import statements
  (blanked before tokenizing): the handout says what to import. The reference
  (``reference/<module>.py``, when this checkout has it) is compared as one
  more source, named ``(reference)``: a submission that copies the solutions
  shows up paired with it.
* A pair's ``similarity`` is the larger of its two sides' shares (the fraction
  of a side's fingerprinted tokens found in the other), so a short file copied
  whole into a longer one ranks high too; both shares are in the CSV.
* Outputs in ``DIR``: ``pairs.csv`` (every pair sharing any code, ranked),
  ``similarity.csv`` (one row per submission for the gradebook: its highest
  similarity, with whom and in which module, and its similarity to the
  reference), and ``report.html`` (the ranked pairs, then the flagged pairs'
  code side by side with the shared parts marked). Everything taken from a
  submission is HTML-escaped, and the page forbids scripts (a
  Content-Security-Policy that allows no script source), so nothing from a
  submission can run in an instructor's browser.
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grader.instructor.discovery import Submission, discover, unpack_export
from grader.instructor.files import csv_text
from grader.instructor.precheck import precheck
from grader.sandbox.submission import locate
from grader.sandbox.workcopy import SubmissionError, is_plain_module, make_working_copy
from grader.util import REPO, write_atomic
from tests.harness import HANDOUT_MODULES

if TYPE_CHECKING:
    from copydetect.detector import CodeFingerprint

REFERENCE_ID = "(reference)"
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
#: Pairs at or above this similarity are flagged and shown side by side.
THRESHOLD = 0.5
#: A module file larger than this is compared on its first MAX_FILE_BYTES only.
MAX_FILE_BYTES = 1 << 20

PAIR_COLUMNS = ["rank", "module", "submission_a", "submission_b", "similarity", "similarity_a",
                "similarity_b", "shared_tokens", "flagged", "submitters_a", "submitters_b"]
SUBMISSION_COLUMNS = ["id", "submitters", "max_similarity", "most_similar_to", "module",
                      "reference_similarity", "library_similarity", "flagged", "skipped"]


@dataclass
class Source:
    """One submission's code per handout module (or the reference's, or
    torch.optim's): what :func:`module_units` makes of its files."""

    id: str
    submitters: str = ""
    files: dict[str, str] = field(default_factory=dict)
    skipped: str = ""  # why it could not be staged (then ``files`` is empty)


@dataclass(eq=False)  # identity: the slices are arrays
class Pair:
    """Two sources' shared code in one module: each side's share and where it lies."""

    module: str
    a: str
    b: str
    similarity: float
    similarity_a: float
    similarity_b: float
    shared_tokens: int
    slices_a: np.ndarray  # 2 x N start/end offsets of the shared parts in a's text
    slices_b: np.ndarray


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


def _fingerprint(name: str, text: str, window: int, boilerplate: np.ndarray | None = None) -> CodeFingerprint:
    from copydetect.detector import CodeFingerprint  # tokenizes with pygments; never imports the code

    return CodeFingerprint(name, NOISE, window, boilerplate=boilerplate, language="python",
                           fp=io.StringIO(without_imports(text)))  # same offsets: the report marks ``text``


def compare_module(module: str, sources: Sequence[Source], stub: str) -> list[Pair]:
    """Every pair of ``sources`` sharing code in ``module`` (the stub's code removed)."""
    from copydetect.detector import compare_files

    boilerplate = np.unique(np.array(sorted(_fingerprint("stub.py", stub, 1).hashes), dtype=np.int64))
    prints = []
    for src in sources:
        text = src.files.get(module)
        if text is None:
            continue
        fp = _fingerprint(f"{src.id}/{module}.py", text, WINDOW, boilerplate)
        if fp.token_coverage > 0:  # nothing of its own (the stub, or empty): nothing to compare
            prints.append((src.id, fp))
    pairs = []
    for i, (a, fa) in enumerate(prints):
        for b, fb in prints[i + 1:]:
            shared, (sa, sb), (sl_a, sl_b) = compare_files(fa, fb)
            if shared <= 0:
                continue
            sa, sb = min(float(sa), 1.0), min(float(sb), 1.0)
            pairs.append(Pair(module, a, b, max(sa, sb), sa, sb, int(shared), np.asarray(sl_a), np.asarray(sl_b)))
    return pairs


def compare(sources: Sequence[Source], stubs: dict[str, str]) -> list[Pair]:
    """All pairs over all handout modules, ranked by similarity (highest first)."""
    pairs = [p for m in HANDOUT_MODULES for p in compare_module(m, sources, stubs.get(m, ""))]
    pairs.sort(key=lambda p: (-p.similarity, -p.shared_tokens, p.module, p.a, p.b))
    return pairs


def stubs_of(repo: Path = REPO) -> dict[str, str]:
    """The handout's stubs by module, as :func:`module_units` makes them (each
    stub with the stubs' ``__init__``): their fingerprints never count as
    shared, those across the two files included, so that two students who left
    a module as the stub share nothing in it."""
    return module_units(_modules(repo / "student")) if (repo / "student").is_dir() else {}


# ------------------------------------------------------------------ outputs


def pairs_csv(pairs: Sequence[Pair], sources: Sequence[Source], threshold: float) -> str:
    """``pairs.csv``: every pair sharing code, ranked (columns: :data:`PAIR_COLUMNS`)."""
    who = {s.id: s.submitters for s in sources}
    return csv_text(PAIR_COLUMNS, ([rank, p.module, p.a, p.b, f"{p.similarity:.3f}", f"{p.similarity_a:.3f}",
                                    f"{p.similarity_b:.3f}", p.shared_tokens, int(p.similarity >= threshold),
                                    who.get(p.a, ""), who.get(p.b, "")] for rank, p in enumerate(pairs, 1)))


def submissions_csv(pairs: Sequence[Pair], sources: Sequence[Source], threshold: float) -> str:
    """``similarity.csv``: one row per submission (columns: :data:`SUBMISSION_COLUMNS`)."""
    rows = []
    for s in sources:
        if s.id in (REFERENCE_ID, LIBRARY_ID):
            continue
        mine = [p for p in pairs if s.id in (p.a, p.b)]  # ranked: the first is the highest
        best = mine[0] if mine else None
        ref = max((p.similarity for p in mine if REFERENCE_ID in (p.a, p.b)), default=0.0)
        lib = max((p.similarity for p in mine if LIBRARY_ID in (p.a, p.b)), default=0.0)
        other = "" if best is None else (best.b if best.a == s.id else best.a)
        rows.append([s.id, s.submitters, f"{best.similarity:.3f}" if best else "0.000", other,
                     best.module if best else "", f"{ref:.3f}", f"{lib:.3f}",
                     int(bool(best) and best.similarity >= threshold), s.skipped])
    return csv_text(SUBMISSION_COLUMNS, rows)


def _marked(text: str, slices: np.ndarray) -> str:
    """``text`` escaped, with the shared parts in <mark> (slices: 2 x N offsets)."""
    out, pos = [], 0
    spans = sorted((int(s), int(e)) for s, e in zip(*slices, strict=True)) if slices.size else []
    for start, end in spans:
        start = max(start, pos)
        if end <= start:
            continue
        out += [html.escape(text[pos:start]), "<mark>", html.escape(text[start:end]), "</mark>"]
        pos = end
    out.append(html.escape(text[pos:]))
    return "".join(out)


_STYLE = """body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.pair{display:flex;gap:1em}
.pair>div{flex:1;min-width:0}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;font-size:12px}
mark{background:#ffd27f}"""


def report_html(pairs: Sequence[Pair], sources: Sequence[Source], threshold: float, top: int) -> str:
    """The report page. Every string from a submission goes through html.escape."""
    e = html.escape
    texts = {(s.id, m): t for s in sources for m, t in s.files.items()}
    shown = [p for p in pairs if p.similarity >= threshold][:top]
    skipped = [s for s in sources if s.skipped]
    rows = "".join(
        f"<tr><td>{i}</td><td>{e(p.module)}</td><td>{e(p.a)}</td><td>{e(p.b)}</td>"
        f"<td>{p.similarity:.0%}</td><td>{p.similarity_a:.0%} / {p.similarity_b:.0%}</td>"
        f"<td>{p.shared_tokens}</td><td>" + (f'<a href="#pair-{i}">side by side</a>' if p in shown else "")
        + "</td></tr>" for i, p in enumerate(pairs[: max(top, len(shown))], 1))
    parts = [
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">",
        # No script of any origin may run here, whatever a submission's text holds.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'none'\">",
        f"<title>Similarity report</title><style>{_STYLE}</style></head><body>",
        f"<h1>Similarity report</h1><p>{sum(s.id not in (REFERENCE_ID, LIBRARY_ID) for s in sources)} submissions"
        + (" and the reference" if any(s.id == REFERENCE_ID for s in sources) else "")
        + (f" and {e(LIBRARY_ID)}" if any(s.id == LIBRARY_ID for s in sources) else "")
        + f"; modules: {e(', '.join(HANDOUT_MODULES))}, each with the modules of its package it imports. "
        "The stubs' code never counts. "
        f"Similarity: the larger share of either side's code found in the other "
        f"(identifiers renamed do not hide a copy). Flagged: at or above {threshold:.0%}.</p>",
    ]
    if skipped:
        parts.append("<h2>Skipped</h2><ul>" + "".join(f"<li>{e(s.id)}: {e(s.skipped)}</li>" for s in skipped)
                     + "</ul>")
    parts.append("<h2>Pairs, most similar first</h2><table><tr><th>#</th><th>module</th><th>a</th><th>b</th>"
                 f"<th>similarity</th><th>a / b</th><th>shared tokens</th><th></th></tr>{rows}</table>")
    for i, p in enumerate(pairs, 1):
        if p not in shown:
            continue
        parts.append(
            f'<h2 id="pair-{i}">#{i} {e(p.module)}: {e(p.a)} and {e(p.b)} ({p.similarity:.0%})</h2>'
            f'<div class="pair"><div><h3>{e(p.a)} ({p.similarity_a:.0%} shared)</h3>'
            f"<pre>{_marked(texts.get((p.a, p.module), ''), p.slices_a)}</pre></div>"
            f"<div><h3>{e(p.b)} ({p.similarity_b:.0%} shared)</h3>"
            f"<pre>{_marked(texts.get((p.b, p.module), ''), p.slices_b)}</pre></div></div>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def report(root: Path, out: Path, *, exclude: Iterable[Path] = (), with_reference: bool = True,
           with_library: bool = True, threshold: float = THRESHOLD, top: int = 100,
           quiet: bool = False) -> list[Pair]:
    """Stage the submissions in ``root``, compare them, write DIR's three files."""
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
    pairs = compare(everything, stubs_of())
    write_atomic(out / "pairs.csv", pairs_csv(pairs, everything, threshold))
    write_atomic(out / "similarity.csv", submissions_csv(pairs, everything, threshold))
    write_atomic(out / "report.html", report_html(pairs, everything, threshold, top))
    if not quiet:
        flagged = [p for p in pairs if p.similarity >= threshold]
        print(f"similarity: {len(sources)} submissions, {len(pairs)} pairs sharing code, "
              f"{len(flagged)} at or above {threshold:.0%}; report in {out / 'report.html'}")
        for p in flagged[:10]:
            print(f"  {p.similarity:4.0%}  {p.module:<11} {p.a}  {p.b}")
    return pairs


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m grader similarity``."""
    p = argparse.ArgumentParser(prog="python -m grader similarity", description=__doc__.split("\n\n")[0])
    p.add_argument("submissions", type=Path, help="folder of submissions (or an export zip), as for batch")
    p.add_argument("--out", type=Path, default=Path("similarity-out"), help="output folder")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help=f"flag pairs at or above this similarity, 0..1 (default: {THRESHOLD})")
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
    report(args.submissions, args.out.resolve(), with_reference=not args.no_reference,
           with_library=not args.no_library, threshold=args.threshold, top=args.top, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
