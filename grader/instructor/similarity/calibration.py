"""Thresholds measured on honest pairs (complete solutions written apart),
and each pair's verdict over its modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from grader.corpus import REFERENCE_LINE
from grader.instructor.similarity.index import Corpus, ModuleIndex, Pair, score_pair
from grader.instructor.similarity.settings import DEFAULTS, HANDOUT_MODULES, HONEST_PREFIX, Settings


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


def honest_pairs(corpus: Corpus, settings: Settings = DEFAULTS) -> list[HonestPair]:
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


def calibrate(corpus: Corpus, settings: Settings = DEFAULTS) -> tuple[Calibration, Settings]:
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


