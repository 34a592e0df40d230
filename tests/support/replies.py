"""The exception redis-py makes of an error reply, on every redis-py the package allows."""

from __future__ import annotations

import inspect

try:  # redis-py 5+
    from redis._parsers.base import BaseParser
except ImportError:  # redis-py 4.x
    from redis.connection import BaseParser  # type: ignore[attr-defined,no-redef]


def error_reply(text: str) -> BaseException:
    """What redis-py raises (or puts in a pipeline's replies) for the error ``text``:
    its own parser's mapping (``ResponseError``, ``OutOfMemoryError``, ``ReadOnlyError``
    ...). redis-py 5+ makes ``parse_error`` a class method; 4.x an instance method that
    reads only the class's table, on a class that cannot be instantiated."""
    parse = BaseParser.parse_error
    return parse(text) if inspect.ismethod(parse) else parse(BaseParser, text)
