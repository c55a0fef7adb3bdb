"""Sampling rows from a fitted synthesizer's language model.

* ``constrained`` (beyond the paper): keys and separators are public, so they are
  written, not sampled; each value is sampled from the model restricted to the
  column's valid continuations (categories, or numbers within bounds). Every row
  is valid, and no tokens are spent on structure.
* ``rejection`` (Afonja et al., Section 5, after Borisov et al. 2023): free
  generation, rows that do not parse into valid values are discarded.
* ``imputation`` (Appendix B.1): free generation; invalid cells are removed and the
  model is re-prompted with the valid ones to fill in the rest, up to 15 rounds.

All three run a batch of rows in lock-step, one token per row per step with a
key/value cache. Each row is a small program (a Python generator) that yields the
next token to write (an ``int``) or the set of tokens it may sample from.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Generator
from dataclasses import dataclass

import pandas as pd
import torch

from dpcare.caller import user_stacklevel
from dpcare.exceptions import DataError, SettingsError, UnknownNameError
from dpcare.progress import progress as tqdm
from dpcare.synth.constraints import MISSING, CategoryTrie, NumberRule, is_number_piece
from dpcare.synth.row_tokens import RowTokenizer
from dpcare.synth.serialize import IS, SEP

Program = Generator  # yields int (write this token) or list[int] (sample among these; None: any token)
METHODS = ("constrained", "rejection", "imputation")


@dataclass
class SamplingStats:
    method: str
    rows: int = 0
    attempts: int = 0  # rows generated (including discarded ones)
    seconds: float = 0.0

    @property
    def valid_rate(self) -> float:
        return self.rows / self.attempts if self.attempts else float("nan")

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else float("nan")

    def to_dict(self) -> dict:
        return {"method": self.method, "rows": self.rows, "attempts": self.attempts, "seconds": round(self.seconds, 3),
                "valid_rate": self.valid_rate, "rows_per_second": self.rows_per_second}


class RowSampler:
    """Lock-step batched decoding for ``model`` (a :class:`~dpcare.synth.lm_model.SynthLM`)."""

    def __init__(self, model, rows: RowTokenizer, ranges: dict[str, tuple[float, float]], temperature: float = 1.0,
                 seed: int = 0, max_tokens: int | None = None):
        if temperature <= 0:
            raise SettingsError(f"temperature must be > 0, got {temperature}")
        self.model, self.rows, self.temperature, self.max_tokens = model, rows, temperature, max_tokens
        self.schema = rows.serializer.schema
        self.gen = torch.Generator().manual_seed(seed)
        self.sep = rows.ids(SEP.rstrip())
        self.vocab = model.token_ids.tolist()
        self.piece = {i: rows.tokenizer.decode([i]) for i in self.vocab}
        self.tries, self.numbers = {}, {}
        for c in self.schema.columns:
            if c.kind == "categorical":
                texts = list(c.categories) + ([MISSING] if c.nullable else [])
                self.tries[c.name] = CategoryTrie({t: rows.ids(" " + t) for t in texts})
            else:
                lo, hi = ranges[c.name]
                self.numbers[c.name] = NumberRule(lo, hi, rows.serializer.digits(c.name), c.nullable)
        number_tokens = [i for i in self.vocab if is_number_piece(self.piece[i])]
        self.number_candidates = number_tokens + rows.ids(" " + MISSING)
        self._allowed: dict[tuple[str, str], list[int]] = {}
        self.max_tokens = max_tokens or 2 * self.longest_row_tokens(ranges)

    def longest_row_tokens(self, ranges: dict[str, tuple[float, float]]) -> int:
        """An upper bound on the tokens of a valid row, from the schema alone (free generation stops there)."""
        total = 0
        for k, col in enumerate(self.rows.serializer.columns):
            total += sum(len(self.rows.ids(s.text)) for s in self.rows.key_segments(col, first=k == 0))
            spec = self.schema.column(col)
            if spec.kind == "categorical":
                total += max(len(self.rows.ids(" " + v)) for v in (*spec.categories, MISSING))
            else:  # at most one token per character of " -<integer digits>.<decimals>"
                total += 3 + self.numbers[col].max_int_digits + self.numbers[col].digits
        return total + 1
    # ------------------------------------------------------------------ row programs
    def _value(self, column: str, terminator: int, out: dict[str, str]) -> Program:
        """Sample one value; ends when the terminator (the next separator, or eos) is chosen."""
        if column in self.tries:
            trie, prefix = self.tries[column], ()
            while True:
                allowed = list(trie.next(prefix)) + ([terminator] if trie.complete(prefix) else [])
                tok = yield allowed
                if tok == terminator:
                    out[column] = trie.complete(prefix)
                    return
                prefix += (tok,)
        rule, text = self.numbers[column], ""
        while True:
            key = (column, text)
            if key not in self._allowed:
                self._allowed[key] = [t for t in self.number_candidates if rule.feasible(text + self.piece[t])] + (
                    [terminator] if rule.complete(text) else [])
            allowed = self._allowed[key]
            tok = yield allowed
            if tok == terminator:
                out[column] = text[1:]
                return
            text += self.piece[tok]

    def constrained_program(self, conditions: dict[str, str], out: dict[str, str]) -> Program:
        columns = self.rows.serializer.columns
        for k, col in enumerate(columns):
            last = k == len(columns) - 1
            terminator = self.rows.eos if last else self.sep[0]
            keys = [t for seg in self.rows.key_segments(col, first=k == 0) for t in self.rows.ids(seg.text)]
            for t in keys[len(self.sep) if k else 0:]:  # the separator's first token ended the previous value
                yield t
            if col in conditions:
                out[col] = conditions[col]
                for t in self.rows.ids(" " + conditions[col]):
                    yield t
                yield terminator
            else:
                yield from self._value(col, terminator, out)
            if not last:
                yield from self.sep[1:]

    def free_program(self, prompt: list[int], out: list[int]) -> Program:
        for t in prompt:
            yield t
        for _ in range(self.max_tokens):
            tok = yield None
            if tok == self.rows.eos:
                return
            out.append(tok)

    # ------------------------------------------------------------------ the lock-step loop
    @torch.no_grad()
    def run(self, programs: list[Program]) -> None:
        """Drive the programs until all end. The first token fed to every row is bos."""
        n = len(programs)
        alive = [True] * n
        self.model.eval()
        feed = torch.full((n, 1), self.rows.bos, dtype=torch.long)
        logits, cache = self.model(feed, use_cache=True)
        sent: list[int | None] = [None] * n
        while any(alive):
            nxt = []
            for i, prog in enumerate(programs):
                tok = self.rows.eos
                if alive[i]:
                    try:
                        req = prog.send(sent[i])
                        tok = req if isinstance(req, int) else self._sample(logits[i, -1], req)
                    except StopIteration:
                        alive[i] = False
                sent[i] = tok
                nxt.append(tok)
            if not any(alive):
                break
            logits, cache = self.model(torch.tensor(nxt)[:, None], past_key_values=cache, use_cache=True)

    def _sample(self, logits: torch.Tensor, allowed: list[int] | None) -> int:
        if allowed is not None and not allowed:
            raise RuntimeError("constrained decoding reached a state with no valid token (a bug)")
        if allowed is not None and len(allowed) == 1:
            return allowed[0]
        if allowed is None:
            idx = None
            scores = logits
        else:
            idx = self.model.to_output(torch.tensor(allowed))
            scores = logits[idx]
        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        j = int(torch.multinomial(probs, 1, generator=self.gen))
        return allowed[j] if idx is not None else int(self.model.token_ids[j])

    # ------------------------------------------------------------------ public API
    def sample(self, n: int, method: str = "constrained", conditions: pd.DataFrame | None = None,
               batch_size: int = 256, progress: bool = True, max_attempts: int | None = None,
               max_rounds: int = 15) -> tuple[list[dict[str, str]], SamplingStats]:
        """``n`` rows as {column: value text}; ``conditions`` fixes some columns (one row per sample)."""
        if method not in METHODS:
            raise SettingsError(f"method must be one of {METHODS}, got {method!r}")
        if n < 1:
            raise SettingsError(f"n must be >= 1, got {n}")
        cond_rows = self._condition_rows(n, conditions)
        stats, done = SamplingStats(method), {}
        pending = list(range(n))
        max_attempts = max_attempts or 20 * n
        bar = tqdm(total=n, disable=not progress, desc=f"sampling ({method})", leave=False)
        start = time.perf_counter()
        while pending and stats.attempts < max_attempts:
            take = pending[:batch_size]
            for i, row in zip(take, self._batch(method, [cond_rows[i] for i in take], max_rounds)):
                if row is not None:
                    done[i] = row
            stats.attempts += len(take)
            bar.update(sum(i in done for i in take))
            pending = [i for i in pending if i not in done]
        bar.close()
        stats.seconds, stats.rows = time.perf_counter() - start, len(done)
        return [done[i] for i in sorted(done)], stats

    def _condition_rows(self, n: int, conditions: pd.DataFrame | None) -> list[dict[str, str]]:
        if conditions is None:
            return [{} for _ in range(n)]
        if len(conditions) != n:
            raise DataError(f"conditions has {len(conditions)} rows; give one per sampled row ({n})")
        unknown = [c for c in conditions.columns if c not in self.rows.serializer.columns]
        if unknown:
            raise UnknownNameError(f"conditions name unknown columns {unknown}")
        warn_if_not_leading(list(conditions.columns), self.rows.serializer)
        out = []
        for _, r in conditions.iterrows():
            row = {}
            for c, v in r.items():
                text = self.rows.serializer.value_text(c, v)
                if not self.valid_cell(c, text):
                    raise DataError(f"condition {c}={v!r} is not a valid value of column '{c}'")
                row[c] = text
            out.append(row)
        return out

    def _batch(self, method: str, conds: list[dict[str, str]], max_rounds: int) -> list[dict[str, str] | None]:
        """One row per condition, or None where a free generation failed."""
        if method == "constrained":
            outs = [{} for _ in conds]
            self.run([self.constrained_program(c, o) for c, o in zip(conds, outs)])
            return outs
        cells = [dict(c) for c in conds]
        for _ in range(max_rounds if method == "imputation" else 1):
            todo = [i for i, c in enumerate(cells) if len(c) < len(self.rows.serializer.columns)]
            if not todo:
                break
            generated = [[] for _ in todo]
            self.run([self.free_program(self._prompt(self._prompt_cells(cells[i])), g)
                      for i, g in zip(todo, generated)])
            for i, g in zip(todo, generated):
                parsed = self.parse_cells(self.rows.tokenizer.decode(g))
                if method == "rejection":
                    cells[i] = parsed if self._complete(parsed) and _agree(parsed, conds[i]) else {}
                else:
                    cells[i] = {**parsed, **cells[i]}
        return [c if self._complete(c) else None for c in cells]

    def _prompt_cells(self, cells: dict[str, str]) -> dict[str, str]:
        """The cells to re-prompt with. With shuffled columns, all valid cells (any order was seen in training;
        the paper's Appendix B.1). With a fixed order, only the valid cells BEFORE the first missing column:
        a model trained on one order continues after the last column it is shown, so a prompt that skips a
        column (e.g. "income, age, race") would never get the skipped column filled in."""
        if self.rows.serializer.order == "shuffle":
            return cells
        prefix = {}
        for col in self.rows.serializer.columns:
            if col not in cells:
                break
            prefix[col] = cells[col]
        return prefix

    def _prompt(self, cells: dict[str, str]) -> list[int]:
        """Tokens of the given cells, in the fixed column order, ready for the next key."""
        ids = []
        for k, col in enumerate(c for c in self.rows.serializer.columns if c in cells):
            for seg in self.rows.key_segments(col, first=k == 0):
                ids += self.rows.ids(seg.text)
            ids += self.rows.ids(" " + cells[col])
        return ids + (self.sep if cells else [])

    def _complete(self, cells: dict[str, str]) -> bool:
        return set(cells) == set(self.rows.serializer.columns)

    def valid_cell(self, column: str, text: str) -> bool:
        if column in self.tries:
            return self.tries[column].complete(tuple(self.rows.ids(" " + text))) is not None
        return self.numbers[column].complete(" " + text)

    def parse_cells(self, text: str) -> dict[str, str]:
        """The valid cells of generated text: first valid occurrence of each known column."""
        cells: dict[str, str] = {}
        for cell in text.split(SEP):
            key, sep, value = cell.strip().partition(IS)
            if sep and key in self.rows.serializer.columns and key not in cells and self.valid_cell(key, value):
                cells[key] = value
        return cells


def warn_if_not_leading(given: list[str], serializer) -> None:
    """Conditioning is exact only for the leading columns of a fixed order: a column written before a given one
    is sampled without knowing it (with ``target-last``, every feature before a given target)."""
    if serializer.order == "shuffle" or not given:
        return
    leading = serializer.columns[:len(given)]
    if set(given) != set(leading):
        before = [c for c in serializer.columns[:max(serializer.columns.index(g) for g in given)] if c not in given]
        warnings.warn(f"conditions on {given} are not the leading columns of the order {serializer.order!r}: "
                      f"{before} are sampled before them, without knowing them, so the rows are not a sample "
                      "conditional on the given values (rejection sampling is; or condition on leading columns)",
                      stacklevel=user_stacklevel())


def _agree(parsed: dict[str, str], conditions: dict[str, str]) -> bool:
    return all(parsed.get(c) == v for c, v in conditions.items())


def cells_to_frame(rows: list[dict[str, str]], schema) -> pd.DataFrame:
    """Value texts to a table like :func:`dpcare.data.load_table` gives: numbers as floats, 'missing' as NaN,
    categories as declared (integers where every declared category is an integer, e.g. a 0/1 label)."""
    cols = [schema.target] + schema.feature_columns
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)
    for c in cols:
        spec = schema.column(c)
        values = df[c].where(df[c] != MISSING, None)
        if spec.kind == "numeric":
            df[c] = pd.to_numeric(values, errors="raise").astype(float)
        elif all(re.fullmatch(r"-?[0-9]+", v) for v in spec.categories):
            df[c] = pd.Series([None if v is None else int(v) for v in values], dtype=object)
        else:
            df[c] = values.astype(object)
    return df
