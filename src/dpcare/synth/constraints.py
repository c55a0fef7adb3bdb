"""What the constrained decoder may write for one column's value.

Categorical values follow a trie of the categories' token sequences; numbers are
checked as text: a prefix is allowed only if it can still be completed to a
well-formed number, with at most the declared decimals, inside the column's
bounds. "missing" is allowed only for columns declared nullable.
"""

from __future__ import annotations

import re
from functools import lru_cache

from dpcare.exceptions import SpecError

MISSING = "missing"
_NUMBER = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$")
_PIECE = re.compile(r"^ ?[0-9.\-]*$")
_PREFIX = re.compile(r"^-?((0|[1-9][0-9]*)(\.[0-9]*)?)?$")


def is_number_piece(piece: str) -> bool:
    """A token that can be part of a number: digits, '.', '-', at most one leading space."""
    return piece != "" and bool(_PIECE.fullmatch(piece))


class CategoryTrie:
    """Token sequences of the allowed values; ``next(prefix)`` lists the tokens that may follow."""

    def __init__(self, sequences: dict[str, list[int]]):
        self.values = {tuple(seq): text for text, seq in sequences.items()}
        self._next: dict[tuple[int, ...], set[int]] = {}
        for seq in self.values:
            for i in range(len(seq)):
                self._next.setdefault(seq[:i], set()).add(seq[i])

    def next(self, prefix: tuple[int, ...]) -> set[int]:
        return self._next.get(prefix, set())

    def complete(self, prefix: tuple[int, ...]) -> str | None:
        return self.values.get(prefix)


class NumberRule:
    """Numbers in [lo, hi] with at most ``digits`` decimals, written after a leading space."""

    def __init__(self, lo: float, hi: float, digits: int, nullable: bool):
        if not lo <= hi:
            raise SpecError(f"numeric bounds need lo <= hi, got {lo}, {hi}")
        self.lo, self.hi, self.digits, self.nullable = lo, hi, digits, nullable
        self.max_int_digits = len(str(int(max(abs(lo), abs(hi)))))

    def complete(self, text: str) -> bool:
        """A whole value: ' ' + a number inside the bounds, or ' missing' for a nullable column."""
        if not text.startswith(" "):
            return False
        body = text[1:]
        if body == MISSING:
            return self.nullable
        if not _NUMBER.fullmatch(body) or (("." in body) and len(body.split(".")[1]) > self.digits):
            return False
        return self.lo <= float(body) <= self.hi and not (float(body) == 0 and body.startswith("-"))

    @lru_cache(maxsize=100_000)  # noqa: B019  (one rule per column, few distinct prefixes)
    def feasible(self, text: str) -> bool:
        """Can ``text`` still be extended (or is it already) a complete value?"""
        if text == "":
            return True
        if not text.startswith(" "):
            return False
        body = text[1:]
        if self.nullable and MISSING.startswith(body):
            return True
        if not _PREFIX.fullmatch(body):
            return False
        int_part, _, frac = body.lstrip("-").partition(".")
        if len(int_part) > self.max_int_digits or len(frac) > self.digits:
            return False
        if "." in body and self.digits == 0:
            return False
        return self._reachable(body)

    def _reachable(self, body: str) -> bool:
        """Does some completion of the number prefix ``body`` fall in [lo, hi]? (closed intervals)"""
        neg = body.startswith("-")
        mag = body.lstrip("-")
        if mag == "":  # nothing yet, or only a sign
            return self.lo < 0 if neg else True
        step = 10.0 ** -self.digits if self.digits else 0.0
        int_part, dot, frac = mag.partition(".")
        base = float(mag.rstrip("."))
        if dot:
            spans = [(base, base + (10.0 ** -len(frac) - step if len(frac) < self.digits else 0.0))]
        else:
            spans = [(base, base + (1 - step if self.digits else 0.0))]  # adding decimals (or none)
            if int_part != "0":  # adding integer digits
                spans += [(base * 10**e, (base + 1) * 10**e - (step or 1))
                          for e in range(1, self.max_int_digits - len(int_part) + 1)]
        for a, b in spans:
            lo, hi = (-b, -a) if neg else (a, b)
            if lo <= self.hi and hi >= self.lo:
                return True
        return False
