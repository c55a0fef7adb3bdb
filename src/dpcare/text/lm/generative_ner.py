"""Generative NER with a causal LM: the prompt and target format, note windows, and greedy decoding
constrained to spans of the note.

Format. Prompt: an instruction naming the labels, ``"\\nNote:\\n"``, the note text (or a window of it),
``"\\nEntities:"``. Target: ``" " + json.dumps([{"type": label, "text": text}, ...], ensure_ascii=False)``
with the entities in order of appearance (by start), then EOS.

Windows (:func:`note_windows`): a note is cut into windows of ``window`` tokens every ``stride`` tokens,
the last one ending at the note's end; an entity that lies wholly in no window (only possible when an
entity is longer than ``window - stride`` tokens) gets a window of its own starting at its first token,
so every entity appears whole in some window. ``stride=None`` disables sliding: a note longer than
``window`` tokens is then an error. A window's target lists the entities wholly inside it. A note's
entities are the spans of all its windows made whole (:func:`~dpcare.text.spans.whole_entities`): a span
that cuts a word (decoded from a window whose edge cuts it, say) is dropped, and of overlapping spans the
longest is kept.

Constrained decoding (:class:`ConstrainedDecoder`): greedy, but at every step only tokens that keep the
output a prefix of the canonical JSON above are allowed (found by walking a character trie of the
vocabulary along a character automaton of the format). Types come from the label set; an entity's text
must be a non-empty substring of the note without leading or trailing whitespace, occurring at or after
the end of the previous entity. So each entity maps to the FIRST occurrence of its text at or after the
previous entity's end (ties of repeated strings thus resolve to the earliest place; on the generated
corpus the gold entities round-trip to their own offsets in 9,138 of 9,139 cases). Tokens that decode
to partial UTF-8 characters are never allowed: a character must be reachable by whole-character pieces
(true for every character of the generated corpus with the GPT-2 and SmolLM2 vocabularies).
Supported tokenizers: byte-level BPE ones (GPT-2, SmolLM2, Llama 3...), whose pieces concatenate to the
decoded text; others raise :class:`~dpcare.exceptions.SpecError`.
"""

from __future__ import annotations

import bisect
import json
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import ClassVar, NamedTuple

import torch

from dpcare.exceptions import DataError, SpecError
from dpcare.text.spans import ENTITY_LABELS, Span, whole_entities

NOTE_HEADER, ANSWER_HEADER = "\nNote:\n", "\nEntities:"
TARGET_PREFIX = " "  # the target starts with a space after "Entities:" (byte-level BPE attaches it)


def ner_prompt(text: str, labels: Sequence[str] = ENTITY_LABELS) -> str:
    """The prompt of one note window."""
    return (f"Extract the clinical entities of types {', '.join(labels)} from the note, in order of appearance, "
            f'as a JSON list of {{"type": ..., "text": ...}} objects.' + NOTE_HEADER + text + ANSWER_HEADER)


def ner_target(spans: Iterable[Span]) -> str:
    """The target of a window holding ``spans`` (sorted by start here)."""
    items = [{"type": s.label, "text": s.text} for s in sorted(spans, key=lambda s: (s.start, s.end))]
    return TARGET_PREFIX + json.dumps(items, ensure_ascii=False)


# --------------------------------------------------------------------------- windows
def note_windows(text: str, tokenizer, window: int | None, stride: int | None, spans: Sequence[Span] = (),
                 name: str = "note") -> list[tuple[int, int]]:
    """Character ranges [start, end) of the token windows of ``text`` (see the module docstring); every
    span of ``spans`` lies wholly inside at least one of them. ``window=None``: the whole note."""
    if window is None or not text:
        return [(0, len(text))]
    if window < 1 or (stride is not None and stride < 1):
        raise DataError(f"window and stride must be >= 1 tokens, got window={window}, stride={stride}")
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    n = len(offsets)
    if n <= window:
        return [(0, len(text))]
    if stride is None:
        raise DataError(f"{name} has {n} tokens, more than window={window}, and sliding windows are disabled "
                        "(stride=None): pass a stride or a larger window")
    starts = list(range(0, n - window + 1, stride))
    if starts[-1] + window < n:
        starts.append(n - window)
    ranges = {(offsets[s][0], offsets[s + window - 1][1]) for s in starts}
    ends = [e for _, e in offsets]
    for span in spans:
        if any(a <= span.start and span.end <= b for a, b in ranges):
            continue
        first = bisect.bisect_right(ends, span.start)  # the token holding the span's first character
        last = min(first + window, n) - 1
        if offsets[last][1] < span.end:
            raise DataError(f"{name}: entity {span.text!r} [{span.start}:{span.end}] is longer than "
                            f"window={window} tokens")
        ranges.add((offsets[first][0], offsets[last][1]))
    return sorted(ranges)


def spans_in(spans: Iterable[Span], start: int, end: int) -> list[Span]:
    """The spans wholly inside [start, end), shifted to offsets within that window."""
    return [Span(s.start - start, s.end - start, s.label, s.text) for s in spans if start <= s.start and s.end <= end]


# --------------------------------------------------------------------------- the format as an automaton
LIT, OPEN, LABEL, TEXT, AFTER, DONE = range(6)


class State(NamedTuple):
    """Where the output stands: ``phase``; ``buf`` (the literal still due, or the label / text so far);
    ``ends`` (end offsets of the text's occurrences); ``esc`` (a pending JSON escape); the current label, the
    end of the previous entity, and the closed entities as (start, end, label, text)."""

    phase: int
    buf: str = ""
    then: int = DONE
    ends: tuple[int, ...] | None = None
    esc: str = ""
    label: str = ""
    prev_end: int = 0
    spans: tuple[tuple[int, int, str, str], ...] = ()


class NoteIndex:
    """Occurrences of a growing string in a note: ``extend(ends, ch, lo)`` takes the end offsets of the
    occurrences of s (None for the empty string) and returns those of s + ch starting at or after ``lo``."""

    def __init__(self, text: str):
        self.text = text
        self.positions: dict[str, list[int]] = defaultdict(list)
        for i, ch in enumerate(text):
            self.positions[ch].append(i)

    def extend(self, ends: tuple[int, ...] | None, ch: str, lo: int) -> tuple[int, ...]:
        if ends is None:
            at = self.positions.get(ch, ())
            return tuple(i + 1 for i in at[bisect.bisect_left(at, lo):])
        text = self.text
        return tuple(e + 1 for e in ends if e < len(text) and text[e] == ch)


class EntityGrammar:
    """The canonical target format as a character automaton: ``step(state, ch)`` is the next state, or None
    where ``ch`` cannot continue any valid output; ``done(state)`` says the output is complete."""

    def __init__(self, text: str, labels: Sequence[str]):
        for label in labels:
            if not label or json.dumps(label) != f'"{label}"':
                raise SpecError(f"label {label!r} cannot be written in the JSON format without escapes")
        self.labels, self.index = tuple(labels), NoteIndex(text)
        self.last_solid = max((i for i, c in enumerate(text) if not c.isspace()), default=-1)

    def start(self) -> State:
        return State(LIT, TARGET_PREFIX + "[", OPEN)

    @staticmethod
    def done(state: State) -> bool:
        return state.phase == DONE

    def step(self, s: State, ch: str) -> State | None:
        if s.phase == LIT:
            if ch != s.buf[0]:
                return None
            return s._replace(buf=s.buf[1:]) if len(s.buf) > 1 else s._replace(phase=s.then, buf="")
        if s.phase in (OPEN, AFTER):
            if ch == "]":
                return s._replace(phase=DONE)
            item = {OPEN: '{"type": "', AFTER: ', {"type": "'}[s.phase]
            return s._replace(phase=LIT, buf=item[1:], then=LABEL) if ch == item[0] else None
        if s.phase == LABEL:
            if ch == '"':
                known = s.buf in self.labels
                return s._replace(phase=LIT, buf=', "text": "', then=TEXT, label=s.buf) if known else None
            typed = s.buf + ch
            return s._replace(buf=typed) if any(lab.startswith(typed) for lab in self.labels) else None
        if s.phase == TEXT:
            return self._text_step(s, ch)
        return None

    def _text_step(self, s: State, ch: str) -> State | None:
        if s.esc or ch == "\\":  # an escape (as json.dumps writes it) of a character that can come next
            esc = s.esc + ch
            forms = {_escaped(c): c for c in self._next_chars(s) if _escaped(c) != c and self._extend(s, c)}
            if esc in forms:
                return self._extend(s._replace(esc=""), forms[esc])
            return s._replace(esc=esc) if any(f.startswith(esc) for f in forms) else None
        if ch == '"':
            if not s.buf or s.buf[-1].isspace() or not s.ends:
                return None
            end = min(s.ends)
            spans = s.spans + ((end - len(s.buf), end, s.label, s.buf),)
            return State(LIT, "}", AFTER, prev_end=end, spans=spans)
        return None if _escaped(ch) != ch else self._extend(s, ch)

    def _next_chars(self, s: State) -> set[str]:
        text, index = self.index.text, self.index
        if s.ends is None:
            return {c for c, at in index.positions.items() if at and at[-1] >= s.prev_end}
        return {text[e] for e in s.ends if e < len(text)}

    def _extend(self, s: State, ch: str) -> State | None:
        """The text extended by ``ch``: no leading whitespace, and whitespace only where a non-whitespace
        character can still follow (so the text can always be closed: decoding never gets stuck)."""
        if ch.isspace() and not s.buf:
            return None
        ends = self.index.extend(s.ends, ch, s.prev_end)
        if not ends or (ch.isspace() and min(ends) > self.last_solid):
            return None
        return s._replace(buf=s.buf + ch, ends=ends)


def _escaped(ch: str) -> str:
    """How the target format (json.dumps, ensure_ascii=False) writes one character inside a string."""
    return json.dumps(ch, ensure_ascii=False)[1:-1]


# --------------------------------------------------------------------------- the vocabulary as a trie
class VocabTrie:
    """The decoded pieces of a tokenizer's non-special tokens in a character trie (node: [children, ids])."""

    _cache: ClassVar[weakref.WeakKeyDictionary] = weakref.WeakKeyDictionary()

    def __init__(self, tokenizer):
        special = set(tokenizer.all_special_ids)
        self.pieces = [tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in range(len(tokenizer))]
        probe = ner_prompt('Pt w/ "CHF", Cr 1.2 -> 0.9 mg/dL;\n')
        ids = tokenizer(probe, add_special_tokens=False)["input_ids"]
        if "".join(self.pieces[i] for i in ids) != probe:
            raise SpecError(f"{type(tokenizer).__name__}: its token pieces do not concatenate to the decoded text "
                            "(not a byte-level BPE tokenizer); constrained decoding cannot track the output")
        self.root: list = [{}, []]
        for i, piece in enumerate(self.pieces):
            if i in special or not piece or "\ufffd" in piece:
                continue
            node = self.root
            for ch in piece:
                node = node[0].setdefault(ch, [{}, []])
            node[1].append(i)

    @classmethod
    def of(cls, tokenizer) -> VocabTrie:
        """The trie of ``tokenizer``, built once per tokenizer object."""
        trie = cls._cache.get(tokenizer)
        if trie is None:
            trie = cls._cache[tokenizer] = cls(tokenizer)
        return trie


# --------------------------------------------------------------------------- decoding
class ConstrainedDecoder:
    """Greedy decoding of the entity list of a note window, constrained as in the module docstring."""

    def __init__(self, model, tokenizer, labels: Sequence[str] = ENTITY_LABELS, max_new_tokens: int = 512):
        self.model, self.tokenizer, self.labels = model, tokenizer, tuple(labels)
        self.max_new_tokens, self.eos = max_new_tokens, tokenizer.eos_token_id
        self.trie = VocabTrie.of(tokenizer)

    def allowed_tokens(self, grammar: EntityGrammar, state: State) -> list[int]:
        """Every token whose piece keeps the output valid from ``state`` (EOS once the list is complete)."""
        out = [self.eos] if grammar.done(state) else []
        stack = [(self.trie.root, state)]
        while stack:
            node, s = stack.pop()
            for ch, child in node[0].items():
                nxt = grammar.step(s, ch)
                if nxt is not None:
                    out.extend(child[1])
                    stack.append((child, nxt))
        return out

    def decode(self, text: str) -> tuple[list[Span], str]:
        """The entities of ``text`` (one window) as spans of it, and the generated string."""
        return self.decode_many([text])[0]

    def decode_many(self, texts: Sequence[str], batch_size: int = 8,
                    progress: bool = False) -> list[tuple[list[Span], str]]:
        """:meth:`decode` of every text, ``batch_size`` windows per forward pass (left-padded, each row with
        its own positions and grammar; the same result as one at a time, up to floating-point ties)."""
        from dpcare.progress import progress as bar

        prompts = [self.tokenizer(ner_prompt(t, self.labels), add_special_tokens=False)["input_ids"] for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(prompts[i]))  # similar lengths: little padding
        out: list = [None] * len(texts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), bar(total=len(texts), desc="NER windows", disable=not progress) as shown:
                for i in range(0, len(order), batch_size):
                    rows = order[i:i + batch_size]
                    for k, result in zip(rows, self._decode_batch([texts[k] for k in rows], [prompts[k] for k in rows])):
                        out[k] = result
                    shown.update(len(rows))
        finally:
            self.model.train(was_training)
        return out

    def _decode_batch(self, texts: Sequence[str], prompts: Sequence[list[int]]) -> list[tuple[list[Span], str]]:
        grammars = [EntityGrammar(t, self.labels) for t in texts]
        states = [g.start() for g in grammars]
        pieces: list[list[str]] = [[] for _ in texts]
        batch = _Batch(self.model, prompts, self.tokenizer.pad_token_id or self.eos or 0)
        logits, rows = batch.start(), list(range(len(texts)))  # rows[j]: the text of the batch's row j
        for _ in range(self.max_new_tokens):
            chosen, keep = [], []
            for j, k in enumerate(rows):
                allowed = self.allowed_tokens(grammars[k], states[k])
                best = allowed[int(logits[j, allowed].argmax())] if allowed else self.eos
                if best == self.eos:
                    continue
                for ch in self.trie.pieces[best]:
                    states[k] = grammars[k].step(states[k], ch)
                pieces[k].append(self.trie.pieces[best])
                chosen.append(best)
                keep.append(j)
            if not keep:
                break
            if len(keep) < len(rows):  # finished rows leave the batch (and the cache)
                batch.keep(keep)
                rows = [rows[j] for j in keep]
            logits = batch.step(chosen)
        return [([Span(*span) for span in state.spans], "".join(p)) for state, p in zip(states, pieces)]


class _Batch:
    """Greedy decoding state of left-padded prompts: the cache, the attention mask and each row's next
    position. Positions count a row's own tokens from 0 (after a peft prefix's virtual tokens, as in
    training). The first call goes through ``model`` (a peft prefix model adds its prefix to the cache and
    the mask there); later calls go to the underlying model with the cache, so the prefix is not added twice."""

    def __init__(self, model, prompts: Sequence[list[int]], pad: int):
        self.model = model
        self.base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(model, "active_peft_config", None)
        self.virtual = config.num_virtual_tokens if config is not None and config.is_prompt_learning else 0
        device = next(model.parameters()).device
        width = max(map(len, prompts))
        self.ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=device)
        self.device = device
        self.mask = torch.zeros_like(self.ids)
        for k, p in enumerate(prompts):
            self.ids[k, width - len(p):] = torch.tensor(p, device=device)
            self.mask[k, width - len(p):] = 1
        self.past = None

    def start(self) -> torch.Tensor:
        """Logits of each row's first new token."""
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=self.ids, attention_mask=self.mask, position_ids=positions, use_cache=True)
        self.next_position = positions[:, -1:] + 1 + self.virtual
        self.mask = torch.cat([torch.ones_like(self.mask[:, :self.virtual]), self.mask], dim=1)
        self.past = out.past_key_values
        return out.logits[:, -1].float()

    def keep(self, rows: Sequence[int]) -> None:
        """Go on with these rows only (their cache, mask and positions)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        self.mask, self.next_position = self.mask[index], self.next_position[index]
        self.past.batch_select_indices(index)

    def step(self, tokens: Sequence[int]) -> torch.Tensor:
        """Feed one token per row; logits of the next."""
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device)[:, None]
        self.mask = torch.cat([self.mask, torch.ones_like(ids)], dim=1)
        out = self.base(input_ids=ids, attention_mask=self.mask, position_ids=self.next_position,
                        past_key_values=self.past, use_cache=True)
        self.next_position = self.next_position + 1
        self.past = out.past_key_values
        return out.logits[:, -1].float()


def extract_entities(model, tokenizer, text: str, labels: Sequence[str] = ENTITY_LABELS, window: int | None = 256,
                     stride: int | None = 128, max_new_tokens: int = 512, batch_size: int = 8) -> list[Span]:
    """Spans of ``text`` found by constrained decoding over its windows (as in training); the spans of all
    windows, shifted to note offsets, without duplicates, sorted by position."""
    return extract_entities_many(model, tokenizer, [text], labels, window, stride, max_new_tokens, batch_size)[0]


def extract_entities_many(model, tokenizer, texts: Sequence[str], labels: Sequence[str] = ENTITY_LABELS,
                          window: int | None = 256, stride: int | None = 128, max_new_tokens: int = 512,
                          batch_size: int = 8, progress: bool = False) -> list[list[Span]]:
    """:func:`extract_entities` of every text, the windows of all texts decoded ``batch_size`` at a time. The
    spans of a note's windows are made whole entities (:func:`~dpcare.text.spans.whole_entities`): a piece of a
    word, e.g. one decoded from a window that cuts the word, is dropped, and of overlapping spans the longest is
    kept."""
    decoder = ConstrainedDecoder(model, tokenizer, labels, max_new_tokens)
    windows = [(i, start, end) for i, text in enumerate(texts)
               for start, end in note_windows(text, tokenizer, window, stride)]
    decoded = decoder.decode_many([texts[i][start:end] for i, start, end in windows], batch_size, progress)
    found: list[set[Span]] = [set() for _ in texts]
    for (i, start, _), (spans, _) in zip(windows, decoded):
        found[i].update(Span(s.start + start, s.end + start, s.label, s.text) for s in spans)
    return [whole_entities(f, text) for f, text in zip(found, texts)]
