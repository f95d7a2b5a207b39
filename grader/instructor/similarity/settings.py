"""What the similarity report counts and flags: its names, defaults, columns
and :class:`Settings` (the contract is the package's, :mod:`grader.instructor.similarity`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests import handout_problems

#: The handout's modules, in handout order (the rubric's list).
HANDOUT_MODULES = tuple(handout_problems())


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


#: The defaults, as the commands' options start (a frozen value: safe to share as a default argument).
DEFAULTS = Settings()
