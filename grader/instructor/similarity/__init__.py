"""Class similarity report: ``python -m grader similarity SUBMISSIONS_DIR --out DIR``.

Pairs of submissions ranked by the code only they share, per handout module,
for instructors who check for copied work (as MOSS or Gradescope's similarity
do). Also run by ``python -m grader batch ... --similarity`` on the batch's
submissions (into ``OUT/similarity``). A flag is a reason for a person to read
the two codes side by side, never a verdict.

Contract:

* The submissions are found, prechecked and staged by the very functions the
  batch and the grader use (:func:`grader.instructor.discovery.discover`,
  :func:`grader.instructor.precheck.precheck`, :func:`grader.staging.submission.locate`,
  :func:`grader.staging.workcopy.make_working_copy`): regular files only (symlinks and
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


# The package's public face: callers use ``similarity.NAME`` whichever module owns it.
from grader.instructor.similarity.calibration import (
    Calibration,
    HonestPair,
    Verdict,
    calibrate,
    complete_lines,
    honest_pairs,
    judged_by,
    pair_verdicts,
    whole_score,
)
from grader.instructor.similarity.index import (
    COMMON,
    EXPECTED,
    MARK_KINDS,
    SHORT,
    Corpus,
    ModuleIndex,
    Pair,
    Region,
    Unit,
    compare,
    expected_code,
    fingerprint_corpus,
    module_index,
    module_pairs,
    score_pair,
)
from grader.instructor.similarity.outputs import (
    build_parser,
    calibration_csv,
    main,
    pair_summary_csv,
    pairs_csv,
    report,
    report_html,
    submissions_csv,
)
from grader.instructor.similarity.settings import (
    CALIBRATION_COLUMNS,
    HANDOUT_MODULES,
    HONEST_PREFIX,
    LIBRARY_ID,
    LIBRARY_SKIPPED,
    MARGIN,
    MAX_FILE_BYTES,
    MAX_HOLDERS,
    MIN_REGION,
    MIN_TOKENS,
    NOISE,
    PAIR_COLUMNS,
    PAIR_SUMMARY_COLUMNS,
    REFERENCE_ID,
    SUBMISSION_COLUMNS,
    THRESHOLD,
    WINDOW,
    Settings,
)
from grader.instructor.similarity.sources import (
    Solution,
    Source,
    correct_solutions,
    library_source,
    module_units,
    reference_source,
    stage,
    stubs_of,
    without_imports,
)

__all__ = [
    "CALIBRATION_COLUMNS", "COMMON", "EXPECTED", "HANDOUT_MODULES", "HONEST_PREFIX", "LIBRARY_ID",
    "LIBRARY_SKIPPED", "MARGIN", "MARK_KINDS", "MAX_FILE_BYTES", "MAX_HOLDERS", "MIN_REGION", "MIN_TOKENS",
    "NOISE", "PAIR_COLUMNS", "PAIR_SUMMARY_COLUMNS", "REFERENCE_ID", "SHORT", "SUBMISSION_COLUMNS", "THRESHOLD",
    "WINDOW", "Calibration", "Corpus", "HonestPair", "ModuleIndex", "Pair", "Region", "Settings", "Solution",
    "Source", "Unit", "Verdict", "build_parser", "calibrate", "calibration_csv", "compare", "complete_lines",
    "correct_solutions", "expected_code", "fingerprint_corpus", "honest_pairs", "judged_by", "library_source",
    "main", "module_index", "module_pairs", "module_units", "pair_summary_csv", "pair_verdicts", "pairs_csv",
    "reference_source", "report", "report_html", "score_pair", "stage", "stubs_of", "submissions_csv",
    "whole_score", "without_imports"
]
