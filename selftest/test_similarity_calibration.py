"""The similarity report (grader/instructor/similarity/) on a class made of
the project's correct corpus (selftest/similarity_class.py), where no honest
pair may be flagged and every disguised copy must be, with the false-flag rate
the report and the docs state."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from grader.instructor import similarity
from grader.util import REPO
from selftest.similarity_class import EDITED, build_class, student_lines
from selftest.similarity_outputs import _flagged, _pairs, _row, _submissions
from tests.harness import HANDOUT_MODULES

#: The class's two runs: with the whole corpus as expected code (as instructors run it), and with the
#: honest students' own lines left out of it (students whose styles the corpus has never seen).
RUNS = ("corpus", "unseen")


@pytest.fixture(scope="module")
def corpus_class(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[str]], dict[str, Path]]:
    """The class of selftest/similarity_class.py: one honest student per line of
    the correct corpus written apart (the reference's line is ``(reference)``
    itself; the corpus's edited copies are no student), a disguised copy of two
    of them and a copy of the reference. Honest students never hold the same
    file; see that module for how the whole submissions are made."""
    root = tmp_path_factory.mktemp("corpus-class")
    honest, copies = build_class(root)
    outs = {run: root.parent / f"corpus-class-{run}" for run in RUNS}
    similarity.report(root, outs["corpus"], quiet=True)
    unseen = [s for s in similarity.correct_solutions()
              if s.line not in {*student_lines(), similarity.HONEST_PREFIX + EDITED}]
    similarity.report(root, outs["unseen"], solutions=unseen, quiet=True)
    return root, [honest, *[list(c) for c in copies]], outs


def _copied_modules(root: Path, original: str) -> set[str]:
    """The modules ``original`` (a student of the class, or the reference) wrote: what a copy of it copied."""
    if original == similarity.REFERENCE_ID:
        return set(HANDOUT_MODULES)
    return {m for m in HANDOUT_MODULES
            if (root / original / "student" / f"{m}.py").read_text() != (REPO / "student" / f"{m}.py").read_text()}


def _flagged_pairs(out: Path) -> set[frozenset[str]]:
    """The pairs of sources ``similarity.csv`` flags (by a module or by all together)."""
    return {frozenset((sid, other)) for sid, row in _submissions(out).items()
            for other in row["flagged_with"].split("; ") if other}


@pytest.mark.parametrize("run", RUNS)
def test_corpus_class_flags_every_copy_and_no_honest_pair(corpus_class, run):
    """Flagged: exactly the copies with what they copied. The disguised copies
    in every module they wrote; the copy with a few lines changed in every
    function as a pair (its modules together, and the modules where enough of
    its runs survived). No pair of honest students, nor of either with the
    reference or torch.optim, nor of a copy with a solution it did not copy."""
    root, (honest, *copies), outs = corpus_class
    assert _flagged_pairs(outs[run]) == {frozenset(c) for c in copies}
    for copy, original in copies:
        if copy == f"copy_of_{EDITED}":
            continue
        for module in _copied_modules(root, original):
            assert _flagged(outs[run], copy, original, module), (run, copy, module, _row(outs[run], copy, original,
                                                                                        module))
    assert set(honest) == {"from_the_handout", "textbook_loops", EDITED}


@pytest.mark.parametrize("run", RUNS)
def test_corpus_class_scores_honest_pairs_far_below_copies(corpus_class, run):
    """Against each module's threshold (pairs.csv): the highest score of a pair
    that is no copy at least 0.1 below it, the lowest of a disguised copy in a
    module it copied at least 0.05 above it (measured: -0.22 and +0.07 with the
    corpus, -0.19 and +0.09 without the students' lines; the copy with lines
    changed in every function is judged as a pair, above)."""
    root, (_, *copies), outs = corpus_class
    copied = {(frozenset(c), m) for c in copies if c[0] != f"copy_of_{EDITED}"
              for m in _copied_modules(root, c[1])}
    edited = frozenset((f"copy_of_{EDITED}", EDITED))
    margins: dict[bool, list[float]] = {True: [], False: []}
    for r in _pairs(outs[run]):
        pair = frozenset((r["submission_a"], r["submission_b"]))
        if pair != edited:
            margins[(pair, r["module"]) in copied].append(float(r["score"]) - float(r["threshold"]))
    print(run, "honest: highest score - threshold", max(margins[False]), "copies: lowest", min(margins[True]))
    assert max(margins[False]) <= -0.1
    assert min(margins[True]) >= 0.05 and len(margins[True]) == len(copied)


def test_corpus_class_pairs_the_reference_copy_with_the_reference(corpus_class):
    _, _, outs = corpus_class
    row = _submissions(outs["corpus"])["copy_of_reference"]
    assert row["most_similar_to"] == similarity.REFERENCE_ID and row["flagged_with"] == similarity.REFERENCE_ID
    assert float(row["reference_score"]) > 0.9


def test_false_flag_rate_is_measured_reported_and_documented(corpus_class):
    """calibration.csv: the honest pairs of the complete solutions written
    apart, every handout module; the report's header and docs/instructors.md
    give the same figure, measured on those solutions."""
    _, _, outs = corpus_class
    rows = list(csv.DictReader(io.StringIO((outs["corpus"] / "calibration.csv").read_text())))
    assert {r["module"] for r in rows} == {*HANDOUT_MODULES, "all modules"}
    pairs = {(r["solution_a"], r["solution_b"]) for r in rows}
    flagged = {(r["solution_a"], r["solution_b"]) for r in rows if r["flagged"] == "1"}
    solutions = len({s for pair in pairs for s in pair})
    honest = len({s for pair in pairs for s in pair if s.startswith(similarity.HONEST_PREFIX)})
    figure = f"{solutions} complete solutions written independently from the handout ({honest} in " \
             f"grader/corpus/honest, {solutions - honest} in grader/corpus/correct): " \
             f"{len(flagged)} of {len(pairs)} honest pairs flagged"
    assert figure in (outs["corpus"] / "report.html").read_text()
    docs = " ".join((REPO / "docs" / "instructors.md").read_text().split())  # wrapped lines joined
    assert f"{len(flagged)} of {len(pairs)} honest pairs" in docs and f"{solutions} complete solutions" in docs


def test_honest_solutions_written_apart_flag_at_most_one_pair_in_twenty():
    """The false-flag rate where it can fail: every two complete solutions of
    grader/corpus/honest (and the corpus's from_the_handout), each written from
    the handout alone in its own style, judged as a new pair is (by thresholds
    measured without either of them): at most one pair in twenty flagged."""
    corpus = similarity.fingerprint_corpus(similarity.correct_solutions(), similarity.stubs_of())
    calibration, settings = similarity.calibrate(corpus)
    print(calibration.summary(), dict(settings.thresholds))
    for hp in calibration.flagged:
        print("flagged:", hp.a, hp.b, calibration.flagged_modules(hp))
    assert calibration.solutions >= 8 and len(calibration.pairs) >= 28
    assert len(calibration.flagged) * 20 <= len(calibration.pairs), calibration.summary()
