"""Java's .properties files (``java.util.Properties.load``), as Kafka's tools and brokers
read them: a client's --command-config and a log dir's meta.properties."""

from __future__ import annotations

import re


class PropertiesError(ValueError):
    """Text that Java's Properties.load refuses (a malformed \\uXXXX escape)."""


_BLANK = " \t\f"  # Java's whitespace in a .properties file


def _logical_lines(text: str) -> list[str]:
    # lines end at \n, \r or \r\n only (str.splitlines would also split at \v, \x1c..)
    lines: list[str] = []
    logical: str | None = None
    for raw in re.split(r"\r\n|\r|\n", text):
        line = raw.lstrip(_BLANK)
        if logical is None and (not line or line[0] in "#!"):
            continue  # (in a continuation a '#' is the value's, not a comment)
        if logical is not None and not line:
            lines.append(logical)  # a backslash before an empty line ends the value
            logical = None
            continue
        logical = (logical or "") + line
        if (len(line) - len(line.rstrip("\\"))) % 2:  # an odd count of backslashes
            logical = logical[:-1]  # goes on in the next line
            continue
        lines.append(logical)
        logical = None
    if logical is not None:
        lines.append(logical)
    return lines


def read_properties(text: str) -> dict[str, str]:
    """Java's .properties form: ``key=value``, ``key: value`` or ``key value``; ``#`` and
    ``!`` comment lines; a trailing backslash continues the line; escapes as Java's
    (``\\uXXXX`` too, and an escaped separator in a key); the last of a key wins. The
    file is read as UTF-8 (Java's Properties.load(InputStream) reads ISO-8859-1; a Kafka
    tool's config of ASCII text, or with \\u escapes, reads the same)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=:" + _BLANK:
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(_BLANK)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_BLANK)
        out[_unescape(key)] = _unescape(rest)  # Java keeps trailing blanks
    return out


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return chr(int(match.group(1), 16))
        char = match.group(2)
        if char == "u":
            raise PropertiesError(f"malformed \\uXXXX escape in {text!r}")
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(char, char)

    return re.sub(r"\\(?:u([0-9A-Fa-f]{4})|(.))", one, text, flags=re.DOTALL)
