"""The class's MFU leaderboard, from the batch's records: who, the boards, their summary section and plot.

Contract: every record whose result holds a graded MFU (a problem object's
``leaderboard``, :class:`grader.mfu.leaderboard.Entry`) is one row of its
board, "GPU" or "CPU stand-in" (a rehearsal, never shown beside a GPU's
figures). Only verified runs are listed: a board counts the unverified ones
and shows nothing else of them. A verified run in doubt is listed as "not
ranked", with why, below the ranked ones, which are sorted by their value:
MFU against the dense peak where every row of the board has one, else MFU over
the reference's (the reference is then 1). The board's reference line is the
median of the reference MFUs its grades measured (each grade times the
reference on its own device).

Who a row is: a pseudonym by default (:func:`pseudonym`: a keyed hash of the
submission id, the key a random one kept in ``OUT/leaderboard.key``, made
once), or the submission id (``batch --leaderboard-ids real``). A keyed hash,
not a plain one: ids are names and student numbers, which anyone could hash
and compare; without the key (which stays in the instructor's output folder)
a pseudonym cannot be traced back, and with the same folder it stays the same
on every rerun and merge.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grader.mfu.leaderboard import BOARDS, GPU, Entry

__all__ = ["ID_MODES", "KEY_FILE", "boards", "class_key", "draw", "markdown", "namer", "pseudonym", "rich_tables"]

#: How rows name submissions (``batch --leaderboard-ids``).
ID_MODES = ("pseudonym", "real")
#: The pseudonyms' key, in the batch's output folder.
KEY_FILE = "leaderboard.key"
MFU_LABEL, RATIO_LABEL = "MFU (of dense peak)", "MFU / reference MFU"


def class_key(out: Path) -> bytes:
    """The class's pseudonym key: ``out/KEY_FILE``, made (32 random bytes, hex,
    readable by its owner only) the first time; the same key ever after.
    ValueError for a key file that holds no such key (pseudonyms would change)."""
    path = out / KEY_FILE
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".{KEY_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        try:  # a link is never half-written, and never replaces a key another batch made first
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    try:
        key = bytes.fromhex(path.read_text().strip())
    except ValueError:
        key = b""
    if len(key) < 16:
        raise ValueError(f"{path} holds no pseudonym key (64 hex digits); restore it, or remove it to make a new "
                         "one (every pseudonym then changes)")
    return key


def pseudonym(key: bytes, sub_id: str) -> str:
    """``anon-`` and 8 hex digits of HMAC-SHA256(key, id): stable for one key, not reversible without it."""
    return "anon-" + hmac.new(key, sub_id.encode(), hashlib.sha256).hexdigest()[:8]


def namer(out: Path, mode: str) -> Callable[[str], str]:
    """How rows of the class in ``out`` are named: the id itself (``real``) or
    its pseudonym; the key is read (or made) only when a row asks for it."""
    if mode not in ID_MODES:
        raise ValueError(f"leaderboard ids must be one of {', '.join(ID_MODES)}, got {mode!r}")
    if mode == "real":
        return str
    key: list[bytes] = []

    def name(sub_id: str) -> str:
        if not key:
            key.append(class_key(out))
        return pseudonym(key[0], sub_id)
    return name


def _entry(rec: dict[str, Any]) -> Entry | None:
    for p in (rec.get("result") or {}).get("problems", []):
        if isinstance(p, dict) and (e := Entry.from_json(p.get("leaderboard"))) is not None:
            return e
    return None


def boards(records: Sequence[dict[str, Any]], name: Callable[[str], str]) -> list[dict[str, Any]]:
    """The boards of the records (see the module's contract), GPU first; none
    where no MFU was graded. Each: ``board``, ``measure`` (the label of
    ``value``), ``reference`` (the line: the same measure, or None),
    ``rows`` (ranked by value, then the marked; each ``who``, ``value``,
    ``mfu``, ``ratio``, ``ranked``, ``doubts``) and ``unverified`` (a count)."""
    found = [(rec["id"], e) for rec in sorted(records, key=lambda r: r["id"]) if (e := _entry(rec)) is not None]
    out = []
    for board in BOARDS:
        entries = [(sub_id, e) for sub_id, e in found if e.board == board]
        listed = [(sub_id, e) for sub_id, e in entries if e.verified]
        if not entries:
            continue
        by_mfu = bool(listed) and all(e.mfu is not None for _, e in listed)
        refs = [e.reference_mfu for _, e in listed if e.reference_mfu is not None]
        rows: list[dict[str, Any]] = [
            {"who": name(sub_id), "value": e.mfu if by_mfu else e.ratio, "mfu": e.mfu, "ratio": e.ratio,
             "ranked": e.ranked, "doubts": list(e.doubts)} for sub_id, e in listed]
        rows.sort(key=lambda r: (not r["ranked"], -r["value"], r["who"]))
        out.append({"board": board, "measure": MFU_LABEL if by_mfu else RATIO_LABEL,
                    "reference": (statistics.median(refs) if refs else None) if by_mfu else 1.0,
                    "rows": rows, "unverified": len(entries) - len(listed)})
    return out


def _title(board: dict[str, Any]) -> str:
    where = "GPU" if board["board"] == GPU else "CPU stand-in: a rehearsal, not GPU figures"
    return f"MFU leaderboard ({where})"


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def markdown(found: list[dict[str, Any]], ids: str) -> list[str]:
    """``summary.md``'s leaderboard sections (none without a graded MFU)."""
    lines: list[str] = []
    for b in found:
        ranked = [r for r in b["rows"] if r["ranked"]]
        median = " (the median of the reference's runs in these grades)" if b["measure"] == MFU_LABEL else ""
        named = (" Ids are pseudonyms (a keyed hash; the key is leaderboard.key in this folder; "
                 "`--leaderboard-ids real` shows the ids).") if ids == "pseudonym" else ""
        lines += [f"## {_title(b)}", "",
                  f"Runs whose work the grader verified, by {b['measure']}; reference: {_g(b['reference'])}"
                  f"{median}.{named}", "",
                  f"| rank | who | {MFU_LABEL} | {RATIO_LABEL} | note |", "|---:|---|---:|---:|---|"]
        for i, r in enumerate(b["rows"], 1):
            rank = str(i) if r["ranked"] else "not ranked"
            note = "; ".join(r["doubts"])
            lines.append(f"| {rank} | {r['who']} | {_g(r['mfu'])} | {_g(r['ratio'])} | {note} |")
        marked = len(b["rows"]) - len(ranked)
        lines += ["", f"{len(ranked)} ranked, {marked} not ranked (timing in doubt: reproduce before ranking), "
                      f"{b['unverified']} not listed (work not verified).", ""]
    return lines


def rich_tables(found: list[dict[str, Any]], top: int = 10) -> list[Any]:
    """The console's leaderboard tables (rich): each board's first ``top`` rows."""
    from rich.table import Table

    tables = []
    for b in found:
        ranked = [r for r in b["rows"] if r["ranked"]]
        t = Table(title=f"{_title(b)}: {len(ranked)} ranked, {len(b['rows']) - len(ranked)} not ranked, "
                        f"{b['unverified']} not verified; reference {_g(b['reference'])}")
        for col in ("rank", "who", MFU_LABEL, RATIO_LABEL):
            t.add_column(col, justify="left" if col == "who" else "right")
        for i, r in enumerate(b["rows"][:top], 1):
            t.add_row(str(i) if r["ranked"] else "not ranked", r["who"], _g(r["mfu"]), _g(r["ratio"]))
        tables.append(t)
    return tables


def draw(ax: Any, board: dict[str, Any]) -> None:
    """One board on ``ax``: a dot per listed run (ranked on the first row,
    the marked on the second, hollow), the reference as a vertical line."""
    ranked = [r["value"] for r in board["rows"] if r["ranked"]]
    marked = [r["value"] for r in board["rows"] if not r["ranked"]]
    # a small fixed jitter spreads equal values; nothing random: the same records draw the same plot
    jitter = [((i * 7) % 11 - 5) / 40 for i in range(max(len(ranked), len(marked)))]
    ax.scatter(ranked, [0 + j for j in jitter[:len(ranked)]], color="#4C72B0", label="ranked", zorder=3)
    ax.scatter(marked, [1 + j for j in jitter[:len(marked)]], facecolors="none", edgecolors="#777777",
               label="not ranked (in doubt)", zorder=3)
    if board["reference"] is not None:
        ax.axvline(board["reference"], color="#C44E52", linestyle="--", label="reference")
    ax.set_yticks([0, 1], ["ranked", "not ranked"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlabel(board["measure"])
    ax.set_title(_title(board), fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
