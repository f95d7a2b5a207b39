"""Fingerprints and pairs: each module's index of sources and the scoring of
two sources' shared code, raw and discounted (expected, common, short).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from grader.corpus import REFERENCE_LINE
from grader.instructor.similarity.settings import DEFAULTS, HANDOUT_MODULES, NOISE, REFERENCE_ID, WINDOW, Settings
from grader.instructor.similarity.sources import Solution, Source, without_imports

if TYPE_CHECKING:
    from copydetect.detector import CodeFingerprint


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
            settings: Settings = DEFAULTS) -> list[Pair]:
    """Every pair of ``sources`` sharing code, over all handout modules (one
    module at a time: only one module's fingerprints are held at once):
    flagged ones first, then by score. ``corpus`` gives the expected code."""
    corpus = corpus or Corpus({}, {}, {})
    return _ranked([p for m in HANDOUT_MODULES for p in module_pairs(module_index(m, sources, stubs.get(m, ""),
                                                                                 corpus, settings))])


