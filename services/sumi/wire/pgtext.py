"""Every str the read side stores, in a form PostgreSQL's text can hold (docs/decisions.md).

PostgreSQL's `text` refuses U+0000, yet an instance ID, a step name, an error message
(any Unicode string, DOC-2, WF-19, WF-34) may hold it. Every read-model connection
(`ADAPTERS`) therefore dumps each str through `encode` and loads each text through
`decode`, so no writer or reader can forget it:

    U+0000 -> U+0001 U+0001,  U+0001 -> U+0001 U+0002,  anything else as it is.

The codes are prefix-free and ordered like the characters they stand for, so encoded
strings compare in "C" (byte) order exactly as the strings do in code point order
(stable paging), equality stays equality, and almost every stored value is its own text.
JSON text never holds a raw control character, so documents pass through unchanged.
"""

from psycopg.adapt import AdaptersMap
from psycopg.postgres import adapters as _defaults
from psycopg.types.string import StrBinaryDumper, StrDumper, StrDumperUnknown, TextBinaryLoader, TextLoader

ESCAPE = "\x01"
_ENCODE = str.maketrans({"\x00": "\x01\x01", "\x01": "\x01\x02"})
_DECODE = {"\x01": "\x00", "\x02": "\x01"}


def encode(value: str) -> str:
    """The stored form of a str: no U+0000, order and equality kept."""
    return value.translate(_ENCODE) if "\x00" in value or ESCAPE in value else value


def decode(stored: str) -> str:
    """The str `encode` stored; a stray escape means a writer bypassed `encode` (ValueError)."""
    if ESCAPE not in stored:
        return stored
    out, i = [], 0
    while (j := stored.find(ESCAPE, i)) >= 0:
        char = _DECODE.get(stored[j + 1 : j + 2])
        if char is None:
            raise ValueError(f"not an encoded text: a bare U+0001 at {j}")
        out += [stored[i:j], char]
        i = j + 2
    out.append(stored[i:])
    return "".join(out)


class _Dumper(StrDumperUnknown):  # text format, type left to the server (as psycopg's default)
    def dump(self, obj: str) -> bytes:
        return encode(obj).encode()


class _TextDumper(StrDumper):  # text format, the text type (looked up by type, as for arrays)
    def dump(self, obj: str) -> bytes:
        return encode(obj).encode()


class _BinaryDumper(StrBinaryDumper):
    def dump(self, obj: str) -> bytes:
        return encode(obj).encode()


class _Loader(TextLoader):
    def load(self, data: bytes | bytearray | memoryview) -> str:
        return decode(bytes(data).decode())


class _BinaryLoader(TextBinaryLoader):
    def load(self, data: bytes | bytearray | memoryview) -> str:
        return decode(bytes(data).decode())


def _adapters() -> AdaptersMap:
    adapters = AdaptersMap(_defaults)
    adapters.register_dumper(str, _BinaryDumper)
    adapters.register_dumper(str, _TextDumper)
    adapters.register_dumper(str, _Dumper)  # the last registered is the default, as in psycopg
    for name in ("text", "varchar"):
        adapters.register_loader(name, _Loader)
        adapters.register_loader(name, _BinaryLoader)
    return adapters


# Pass as `context=` to every connection that reads or writes the read models.
ADAPTERS = _adapters()
