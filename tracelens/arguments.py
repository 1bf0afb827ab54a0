"""The arguments of the public Python functions checked before they are used (``tracelens.api``, and a
Report's notebook methods): a value of the wrong kind is a one-line UsageError naming the function, the
parameter, what it got and what it wants (docs/errors.md, "Arguments of the Python API").

Unchecked, such a value ends in a traceback from deep inside (a list where a figure's name goes: ``unhashable
type``), or worse, in a wrong answer without a word: a str is iterable, so ``comm_patterns="xyz_p2p"`` was a
list of seven one-letter patterns, and every kernel a name with an ``x`` in it counted as communication. A
str where a list of str belongs is therefore refused, never taken as a list of one.

One way to check: a function names each parameter's :class:`Kind` with :func:`takes`, and every call checks
the arguments given (a default is the function's own). Nothing here imports what it checks for: an instance of
a tracelens class is looked for only among the modules already imported (:func:`instance`), so that a check
imports neither numpy nor the analyzers before a report forks its workers.
"""

from __future__ import annotations

import functools
import inspect
import os
import reprlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Callable

from .errors import UsageError

_REFUSED = object()


class Kind:
    """What a parameter takes: ``wants``, in the words of a message ("a str", "a list of str"), and ``admit``,
    which returns the value the function gets (a one-shot iterator of items read into a list) or
    ``_REFUSED``; ``why``: what to add to the message about a refused value."""

    def __init__(self, wants: str | list[str], admit: Callable[[object], object],
                 why: Callable[[object], str] = lambda value: "") -> None:
        self.alternatives = [wants] if isinstance(wants, str) else wants
        self.wants = " or ".join(self.alternatives) if len(self.alternatives) < 3 else \
            ", ".join(self.alternatives[:-1]) + " or " + self.alternatives[-1]
        self.admit = admit
        self.why = why

    def fits(self, value) -> bool:
        """Whether ``value`` is of this kind (an iterator is read to tell)."""
        return self.admit(value) is not _REFUSED

    def __or__(self, other: Kind) -> Kind:
        """This kind or ``other`` (the first that admits the value)."""
        def admit(value):
            got = self.admit(value)
            return other.admit(value) if got is _REFUSED else got
        return Kind(self.alternatives + other.alternatives, admit, lambda value: self.why(value) or other.why(value))


def of_type(wants: str, *types: type, test: Callable[[object], bool] = lambda value: True) -> Kind:
    """A value of one of ``types`` (a bool is no int unless ``bool`` is among them) that passes ``test``."""
    def admit(value):
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types) or not test(value):
            return _REFUSED
        return value
    return Kind(wants, admit)


def instance(module: str, name: str, wants: str) -> Kind:
    """An instance of the class ``name`` of ``module``, looked for only when that module is imported (an
    instance of it cannot exist otherwise): the check imports nothing."""
    def admit(value):
        held = sys.modules.get(module)
        return value if held is not None and isinstance(value, getattr(held, name)) else _REFUSED
    return Kind(wants, admit)


def many(item: Kind, wants: str) -> Kind:
    """A list, tuple, set or other collection (an iterator is read once, into the list the function gets) of
    values of the kind ``item``; never a str, bytes or a mapping, whose items are no such values."""
    def admit(value):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            return _REFUSED
        if isinstance(value, Iterator):
            value = list(value)
        return value if all(item.fits(v) for v in value) else _REFUSED

    def why(value):
        if isinstance(value, str) and item.fits(value):
            return f"; for one, write [{reprlib.repr(value)}]"
        if isinstance(value, (list, tuple, set, frozenset)):
            bad = [v for v in value if not item.fits(v)]
            return f"; it holds {described(bad[0])}" if bad else ""
        return ""
    return Kind(wants, admit, why)


def optional(kind: Kind) -> Kind:
    return kind | Kind("None", lambda value: value if value is None else _REFUSED)


def described(value) -> str:
    """A value as a message names it: its type and its repr, cut short (one line)."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


ANYTHING = Kind("anything", lambda value: value)      # ``self``, and what the function itself looks at
TEXT = of_type("a str", str)
PATTERNS = many(TEXT, "a list of str (regular expressions)")
TEXTS = many(TEXT, "a list of str")
PATH = of_type("a path (str or os.PathLike)", str, os.PathLike)
PATHS = PATH | many(PATH, "a list of paths")
INTEGER = of_type("an int", int)
COUNT = of_type("an int of at least 0", int, test=lambda value: value >= 0)
POSITIVE = of_type("an int of at least 1", int, test=lambda value: value >= 1)
SWITCH = of_type("a bool (True or False)", bool)
FUNCTION = Kind("a function", lambda value: value if callable(value) else _REFUSED)
ENV = Kind("a mapping of str to str (an environment)", lambda value: value if isinstance(value, Mapping) and all(
    isinstance(k, str) and isinstance(v, str) for k, v in value.items()) else _REFUSED)
NAMED = Kind("a mapping of str keys", lambda value: value if isinstance(value, Mapping) and all(
    isinstance(k, str) for k in value) else _REFUSED)


def takes(where: str | None = None, **kinds: Kind):
    """Check, on every call of the function decorated, each argument given against the kind its parameter is
    named with here (every parameter but ``*args``/``**kwargs`` must be named, or none of its calls would be
    checked for it). ``where``: the call as the message names it (the function's name by default). A call
    that does not fit the signature (a missing argument, an unknown keyword) is a UsageError as well."""
    def wrap(fn):
        signature = inspect.signature(fn)
        unnamed = [p.name for p in signature.parameters.values()
                   if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in kinds]
        if unnamed or set(kinds) - set(signature.parameters):
            raise TypeError(f"{fn.__qualname__}: kinds for {unnamed or sorted(set(kinds) - set(signature.parameters))}")
        label = where or f"{fn.__name__}()"

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise UsageError(f"{label}: {exc}") from None
            for name, value in bound.arguments.items():
                kind = kinds.get(name)
                if kind is None:
                    continue
                got = kind.admit(value)
                if got is _REFUSED:
                    raise UsageError(f"{label}: {name} must be {kind.wants}, not {described(value)}{kind.why(value)}")
                bound.arguments[name] = got
            return fn(*bound.args, **bound.kwargs)
        checked.kinds = kinds
        return checked
    return wrap
