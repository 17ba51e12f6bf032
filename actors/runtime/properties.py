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
    text is the caller's to decode (Java's Properties.load(InputStream) reads ISO-8859-1).
    A malformed escape is named by its key, never by its value (it may be a password)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=:" + _BLANK:
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(_BLANK)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_BLANK)
        try:
            name = _unescape(key)
        except PropertiesError:
            raise PropertiesError(f"malformed \\uXXXX escape in the key {key!r}") from None
        try:
            out[name] = _unescape(rest)  # Java keeps trailing blanks
        except PropertiesError:
            raise PropertiesError(f"malformed \\uXXXX escape in the value of {name!r}") \
                from None
    return out


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return chr(int(match.group(1), 16))
        char = match.group(2)
        if char == "u":
            raise PropertiesError("malformed \\uXXXX escape")
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(char, char)

    text = re.sub(r"\\(?:u([0-9A-Fa-f]{4})|(.))", one, text, flags=re.DOTALL)
    # Java escapes UTF-16 units: a character past U+FFFF is two \u escapes, joined here
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def write_properties(items: dict[str, str]) -> str:
    """The text Java's Properties.store writes for ``items`` (without its date comment),
    all ASCII: read_properties reads it back to the same strings, whatever they hold."""
    return "".join(f"{_escape(key, True)}={_escape(value, False)}\n"
                   for key, value in items.items())


_ESCAPED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\",
            "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


def _escape(text: str, is_key: bool) -> str:
    out = []
    for i, char in enumerate(text):
        if char == " ":  # a key's blanks, or a value's leading one, would be separators
            out.append("\\ " if is_key or i == 0 else " ")
        elif char in _ESCAPED:
            out.append(_ESCAPED[char])
        elif " " < char <= "~":
            out.append(char)
        else:  # in UTF-16 units, as Java writes them
            units = char.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[j]:02X}{units[j + 1]:02X}"
                       for j in range(0, len(units), 2))
    return "".join(out)
