"""Class similarity report: ``python -m grader similarity SUBMISSIONS_DIR --out DIR``.

The outputs (the CSVs and ``report.html``) and the command line; the contract is
the package's (:mod:`grader.instructor.similarity`).
"""

from __future__ import annotations

import argparse
import html
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from grader.instructor.discovery import unpack_export
from grader.instructor.files import csv_text
from grader.instructor.similarity.calibration import Calibration, calibrate, pair_verdicts, whole_score
from grader.instructor.similarity.index import (
    MARK_KINDS,
    Pair,
    Region,
    _ranked,
    fingerprint_corpus,
    module_index,
    module_pairs,
)
from grader.instructor.similarity.settings import (
    CALIBRATION_COLUMNS,
    DEFAULTS,
    HANDOUT_MODULES,
    LIBRARY_ID,
    MARGIN,
    MAX_HOLDERS,
    MIN_TOKENS,
    PAIR_COLUMNS,
    PAIR_SUMMARY_COLUMNS,
    REFERENCE_ID,
    SUBMISSION_COLUMNS,
    THRESHOLD,
    Settings,
)
from grader.instructor.similarity.sources import (
    Solution,
    Source,
    correct_solutions,
    library_source,
    reference_source,
    stage,
    stubs_of,
)
from grader.util import write_atomic


def pairs_csv(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings = DEFAULTS) -> str:
    """``pairs.csv``: every module pair sharing code, ranked (columns: :data:`PAIR_COLUMNS`;
    ``threshold``: its module's)."""
    who = {s.id: s.submitters for s in sources}
    return csv_text(PAIR_COLUMNS, ([rank, p.module, p.a, p.b, f"{p.score:.3f}",
                                    f"{settings.threshold_of(p.module):.3f}", int(p.flagged), f"{p.share_a:.3f}",
                                    f"{p.share_b:.3f}", p.rare_tokens, p.own_a, p.own_b,
                                    p.expected_tokens, p.common_tokens, p.short_tokens, f"{p.raw_similarity:.3f}",
                                    f"{p.raw_similarity_a:.3f}", f"{p.raw_similarity_b:.3f}", p.raw_shared_tokens,
                                    who.get(p.a, ""), who.get(p.b, "")] for rank, p in enumerate(pairs, 1)))


def pair_summary_csv(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings = DEFAULTS) -> str:
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


def submissions_csv(pairs: Sequence[Pair], sources: Sequence[Source], settings: Settings = DEFAULTS) -> str:
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
           with_library: bool = True, settings: Settings = DEFAULTS, top: int = 100,
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

