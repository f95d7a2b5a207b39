"""Submitters per submission from a Gradescope export's ``submission_metadata.yml``.

Gradescope writes that file from Ruby (Psych): a block-style YAML document whose
top level maps each submission folder (``submission_123:``) to its metadata,
among which ``:submitters:``, a list of mappings holding ``:name:``, ``:sid:``
and ``:email:`` (Ruby symbols: the keys start with a colon). The format is
Gradescope's, so no simpler one can replace it, and the project depends on no
YAML library (students install nothing for instructors' tools). This module
therefore reads the block subset of YAML with a small parser whose contract is:

* structure comes from indentation only: block mappings (``key: value``,
  ``key:`` followed by a more indented block, or by a sequence at the key's own
  indentation, as Psych writes it), block sequences (``- item``, including a
  mapping started on the dash's line), comments, blank lines, and the
  document markers ``---`` / ``...``;
* every scalar is returned as a string (``'001'`` and ``001`` alike), an empty
  value as ``None``; single- and double-quoted scalars are unquoted with their
  escapes; a plain or quoted scalar continued on more indented lines is folded
  with spaces; block scalars (``|``, ``>``) keep their text; flow collections
  (``[...]``, ``{...}``), tags (``!ruby/...``) and anchors are not interpreted
  (a flow collection is kept as its source text, a tag or anchor is dropped);
* anything else (a tab in an indentation, a line indented where no block can
  start, an unterminated quote, a complex ``?`` key) raises
  :class:`MetadataError` naming the line, never a silently wrong reading.

The batch treats an unreadable metadata file as absent (every submission is
still graded; the gradebook's name, sid and email columns stay empty) and says so.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MetadataError", "parse_block_yaml", "parse_gradescope_metadata"]

_BLOCK_SCALAR = re.compile(r"[|>][-+0-9]*")
_PROPERTY = re.compile(r"^[!&]\S*(\s+|$)")  # a tag or an anchor before a value


class MetadataError(ValueError):
    """The text is outside the YAML subset this module reads (the message names the line)."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _insignificant(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#") or (_indent(line) == 0 and stripped in ("---", "..."))


def _is_item(content: str) -> bool:
    return content == "-" or content.startswith("- ")


def _quoted_end(text: str, lineno: int) -> int:
    """The index just past the closing quote of the quoted scalar starting ``text``."""
    quote, i = text[0], 1
    while i < len(text):
        if quote == "'" and text[i] == "'":
            if text[i + 1:i + 2] == "'":
                i += 2
                continue
            return i + 1
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if quote == '"' and text[i] == '"':
            return i + 1
        i += 1
    raise MetadataError(f"line {lineno}: unterminated {quote}-quoted scalar")


def _unquote(text: str, lineno: int) -> str:
    if text[0] == "'":
        return text[1:-1].replace("''", "'")
    try:
        return str(json.loads(text))
    except ValueError:  # a YAML-only escape (\x41, \e...): keep the text between the quotes
        return text[1:-1]


def _split_entry(content: str, lineno: int) -> tuple[str, str] | None:
    """``(key, rest)`` when ``content`` is a mapping entry, else None."""
    if content.startswith("? "):
        raise MetadataError(f"line {lineno}: complex mapping keys are not supported")
    if content[0] in "'\"":
        end = _quoted_end(content, lineno)
        if content[end:end + 1] == ":" and content[end + 1:end + 2] in ("", " "):
            return _unquote(content[:end], lineno), content[end + 1:].strip()
        return None
    if content[0] in "[{#|>*&!%@`" or _is_item(content):
        return None
    m = re.search(r":(?=\s|$)", content[1:])  # from 1: a Ruby symbol key starts with a colon
    if m is None:
        return None
    return content[:m.start() + 1].rstrip(), content[m.end() + 1:].strip()


class _Reader:
    """A recursive-descent reader over the lines of one document."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        for n, line in enumerate(self.lines, 1):
            body = line.lstrip(" ")
            if body.startswith("\t") and body.strip():
                raise MetadataError(f"line {n}: a tab in the indentation")

    def next_significant(self, i: int) -> int:
        while i < len(self.lines) and _insignificant(self.lines[i]):
            i += 1
        return i

    def node(self, i: int, indent: int) -> tuple[Any, int]:
        """The block node whose first line is ``i`` (at ``indent``), and the line after it."""
        content = self.lines[i].strip()
        if _is_item(content):
            return self.sequence(i, indent)
        if _split_entry(content, i + 1) is not None:
            return self.mapping(i, indent)
        return self.scalar(content, i + 1, indent - 1)

    def mapping(self, i: int, indent: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        i = self.next_significant(i)
        while i < len(self.lines) and _indent(self.lines[i]) == indent:
            entry = _split_entry(self.lines[i].strip(), i + 1)
            if entry is None:
                raise MetadataError(f"line {i + 1}: expected 'key: value' at this indentation")
            key, rest = entry
            out[key], i = self.value(rest, i + 1, indent)
            i = self.next_significant(i)
        if i < len(self.lines) and _indent(self.lines[i]) > indent:
            raise MetadataError(f"line {i + 1}: unexpected indentation")
        return out, i

    def sequence(self, i: int, indent: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        i = self.next_significant(i)
        while i < len(self.lines) and _indent(self.lines[i]) == indent and _is_item(self.lines[i].strip()):
            after = self.lines[i].strip()[1:]
            rest = after.lstrip(" ")
            if not rest or rest.startswith("#"):
                item, i = self.value("", i + 1, indent)
            else:  # "- key: value": the item's block starts on the dash's line, at the text's column
                column = indent + 1 + len(after) - len(rest)
                self.lines[i] = " " * column + rest
                item, i = self.node(i, column)
            out.append(item)
            i = self.next_significant(i)
        if i < len(self.lines) and _indent(self.lines[i]) > indent:
            raise MetadataError(f"line {i + 1}: unexpected indentation")
        return out, i

    def value(self, rest: str, i: int, indent: int) -> tuple[Any, int]:
        """The value of an entry (or item) at ``indent`` whose line ended with ``rest``;
        ``i`` is the line after it."""
        while (m := _PROPERTY.match(rest)) is not None:
            rest = rest[m.end():]
        if rest and not rest.startswith("#"):
            return self.scalar(rest, i, indent)
        j = self.next_significant(i)
        if j < len(self.lines):
            below = _indent(self.lines[j])
            if below > indent:
                return self.node(j, below)
            if below == indent and _is_item(self.lines[j].strip()):
                return self.sequence(j, indent)  # Psych's "key:" then "- item" at the key's indentation
        return None, i

    def scalar(self, text: str, i: int, indent: int) -> tuple[str, int]:
        """A scalar starting with ``text`` (its line is ``i - 1``), continued on the
        following lines indented more than ``indent``."""
        more: list[str] = []
        while i < len(self.lines) and (not self.lines[i].strip() or _indent(self.lines[i]) > indent):
            more.append(self.lines[i])
            i += 1
        while more and not more[-1].strip():  # trailing blank lines belong to no one
            more.pop()
            i -= 1
        if _BLOCK_SCALAR.fullmatch(text.split(" #")[0].strip()):
            margin = min((_indent(ln) for ln in more if ln.strip()), default=0)
            lines = [ln[margin:] for ln in more]
            return ("\n" if text.startswith("|") else " ").join(lines), i
        joined = " ".join([text, *(ln.strip() for ln in more if ln.strip())])
        if joined[0] in "'\"":
            end = _quoted_end(joined, i)
            return _unquote(joined[:end], i), i
        return re.split(r"\s#", joined, maxsplit=1)[0].strip(), i


def parse_block_yaml(text: str) -> Any:
    """The document in ``text`` read under the module's contract (None when it is empty)."""
    reader = _Reader(text)
    i = reader.next_significant(0)
    if i == len(reader.lines):
        return None
    indent = _indent(reader.lines[i])
    value, i = reader.node(i, indent)
    if reader.next_significant(i) < len(reader.lines):
        raise MetadataError(f"line {reader.next_significant(i) + 1}: content after the document's top node")
    return value


def _field(mapping: dict[str, Any], name: str) -> Any:
    """``mapping[name]``, the key spelled as a Ruby symbol (``:name``) or plainly."""
    return mapping.get(f":{name}", mapping.get(name))


def parse_gradescope_metadata(text: str) -> dict[str, list[dict[str, str]]]:
    """Submitters per submission folder: ``{"submission_123": [{"name": ..., "sid": ...,
    "email": ...}, ...]}``; every top-level key gets a list (empty without
    submitters), a person only the non-empty fields among name, sid and email.
    Raises :class:`MetadataError` when the text is outside the subset read here."""
    doc = parse_block_yaml(text)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise MetadataError("the top level is not a mapping of submission folders")
    out: dict[str, list[dict[str, str]]] = {}
    for folder, entry in doc.items():
        people: list[dict[str, str]] = []
        submitters = _field(entry, "submitters") if isinstance(entry, dict) else None
        for person in submitters if isinstance(submitters, list) else []:
            if isinstance(person, dict):
                fields = {k: v for k in ("name", "sid", "email") if isinstance(v := _field(person, k), str) and v}
                if fields:
                    people.append(fields)
        out[str(folder)] = people
    return out
