"""Named extension points: one small table type instead of ad-hoc dicts of names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from dpcare.exceptions import DPCareError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> objects of one ``kind`` (e.g. "method"), in registration order.

    >>> METHODS = Registry("method")
    >>> @METHODS.register("plain")
    ... def plain(): ...
    >>> METHODS.get("plain") is plain
    True
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name`` (a name can be registered once) and return it."""
        if name in self._entries:
            raise DPCareError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""
        return lambda obj: self.add(name, obj)

    def get(self, name: str) -> T:
        """The object registered as ``name``; an unknown name raises an error listing the known ones."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; choose one of {sorted(self._entries)}") from None

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"
