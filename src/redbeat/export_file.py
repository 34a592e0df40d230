"""The ``redbeat-export/1`` document, streamed both ways: written an entry at a time and
read an entry at a time, so exporting or importing a million entries holds one entry
(and a read buffer) in memory, not the document.

The document is one JSON object, ``{"format": "redbeat-export/1", "prefix": ...,
"exported_at": ..., "entries": [...]}``; the writer puts each entry on a line of its own.
The reader accepts any JSON layout of the same object (pretty-printed, keys in any
order, entries anywhere among them): it decodes the object's members one by one with
the standard decoder, and the entries one by one inside their array. YAML, which
has no such incremental reading here, is read whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

FORMAT = "redbeat-export/1"
#: Characters read from the file at a time.
CHUNK = 1 << 16

_decoder = json.JSONDecoder()
_BLANK = " \t\r\n"
#: Characters that may continue a number.
_NUMBER = frozenset("0123456789.eE+-")


def header(prefix: str, exported_at: float) -> dict[str, Any]:
    return {"format": FORMAT, "prefix": prefix, "exported_at": exported_at}


class JsonWriter:
    """Writes the document to ``out``: the header first, then one line per entry."""

    def __init__(self, out: IO[str], head: dict[str, Any]) -> None:
        self.out = out
        self.count = 0
        out.write(json.dumps(head)[:-1] + ', "entries": [')

    def entry(self, record: dict[str, Any]) -> None:
        self.out.write(("\n" if not self.count else ",\n") + json.dumps(record))
        self.count += 1

    def close(self) -> None:
        self.out.write("\n]}\n" if self.count else "]}\n")


class YamlWriter:
    """The same document in YAML: the header, then each entry as an item of
    ``entries`` (PyYAML dumps one item at a time)."""

    def __init__(self, out: IO[str], head: dict[str, Any], yaml: Any) -> None:
        self.out, self.yaml, self.count = out, yaml, 0
        out.write(yaml.safe_dump(head, sort_keys=False, allow_unicode=True))
        out.write("entries:\n")

    def entry(self, record: dict[str, Any]) -> None:
        self.out.write(self.yaml.safe_dump([record], sort_keys=False, allow_unicode=True))
        self.count += 1

    def close(self) -> None:
        if not self.count:
            self.out.write("[]\n")


class JsonReader:
    """Reads the document from ``source`` (text): :meth:`entries` yields each entry as
    it is decoded; :attr:`head` holds the other members read so far (all of them once
    the entries are exhausted, whatever their order). :attr:`consumed` counts the
    characters read (for a progress bar). ValueError for a text that is not a JSON
    object with an ``entries`` array."""

    def __init__(self, source: IO[str], chunk: int = CHUNK) -> None:
        self.source = source
        self.chunk = chunk
        self.buffer = ""
        self.at = 0
        self.eof = False
        self.consumed = 0
        self.head: dict[str, Any] = {}

    def _fill(self) -> bool:
        """Read more text; False at the end of the file."""
        if self.eof:
            return False
        text = self.source.read(self.chunk)
        if not text:
            self.eof = True
            return False
        self.consumed += len(text)
        self.buffer = self.buffer[self.at:] + text
        self.at = 0
        return True

    def _skip_blank(self) -> str:
        """The next character that is not blank space ('' at the end)."""
        while True:
            while self.at < len(self.buffer) and self.buffer[self.at] in _BLANK:
                self.at += 1
            if self.at < len(self.buffer):
                return self.buffer[self.at]
            if not self._fill():
                return ""

    def _expect(self, allowed: str) -> str:
        char = self._skip_blank()
        if not char or char not in allowed:
            found = repr(char) if char else "the end of the file"
            raise ValueError(f"not a redbeat export: expected one of {allowed!r} at "
                             f"character {self.consumed - len(self.buffer) + self.at}, "
                             f"found {found}")
        self.at += 1
        return char

    def _value(self) -> Any:
        """The next JSON value. Accepted only with a character after it that cannot
        continue it (or at the end of the file): a number cut by the buffer's end
        (``1`` of ``1.5``) would otherwise read as a shorter one."""
        self._skip_blank()
        while True:
            try:
                value, end = _decoder.raw_decode(self.buffer, self.at)
                if self.eof or end < len(self.buffer) and self.buffer[end] not in _NUMBER:
                    self.at = end
                    return value
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise ValueError(f"not a redbeat export: {exc}") from None
            if not self._fill():
                continue  # at the end: decode once more, now final

    def entries(self) -> Iterator[dict[str, Any]]:
        self._expect("{")
        seen_entries = False
        if self._skip_blank() == "}":
            self.at += 1
        else:
            while True:
                key = self._value()
                if not isinstance(key, str):
                    raise ValueError("not a redbeat export: a member name is not text")
                self._expect(":")
                if key == "entries":
                    seen_entries = True
                    yield from self._array()
                else:
                    self.head[key] = self._value()
                if self._expect(",}") == "}":
                    break
        if not seen_entries:
            raise ValueError(f"not a redbeat export (expected format {FORMAT}): no entries")
        if self.head.get("format") != FORMAT:
            raise ValueError(f"not a redbeat export (expected format {FORMAT})")

    def _array(self) -> Iterator[dict[str, Any]]:
        self._expect("[")
        if self._skip_blank() == "]":
            self.at += 1
            return
        while True:
            yield self._value()
            if self._expect(",]") == "]":
                return


def check_head(head: dict[str, Any]) -> None:
    """ValueError unless ``head`` names the format (a header read before the entries:
    the writer puts it first; a document with it after them is checked at the end)."""
    if "format" in head and head["format"] != FORMAT:
        raise ValueError(f"not a redbeat export (expected format {FORMAT})")


__all__ = ["CHUNK", "FORMAT", "JsonReader", "JsonWriter", "YamlWriter", "check_head", "header"]
