"""Table schema and privacy spec: per column its type, role and optional public bounds/categories."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dpcare.exceptions import MissingFileError, SpecError, UnknownNameError

KINDS = ("numeric", "categorical")
ROLES = ("private", "public", "target")
TRANSFORMS = ("none", "log1p")


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    kind: str = "numeric"
    role: str = "public"
    bounds: tuple[float, float] | None = None  # public, data-independent
    categories: tuple[str, ...] | None = None  # public, data-independent (stored as strings)
    nullable: bool = False
    transform: str = "none"
    description: str = ""

    def __post_init__(self):
        where = f"column '{self.name}'"
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"every column needs a non-empty name, got {self.name!r}")
        if self.kind not in KINDS:
            raise SpecError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.role not in ROLES:
            raise SpecError(f"{where}: role must be one of {ROLES}, got {self.role!r}")
        if self.transform not in TRANSFORMS:
            raise SpecError(f"{where}: transform must be one of {TRANSFORMS}, got {self.transform!r}")
        if self.bounds is not None:
            if self.kind != "numeric":
                raise SpecError(f"{where}: bounds are only for numeric columns")
            lo, hi = (float(b) for b in self.bounds)
            if not lo < hi:
                raise SpecError(f"{where}: bounds need lo < hi, got {list(self.bounds)}")
            if self.transform == "log1p" and lo <= -1:
                raise SpecError(f"{where}: log1p needs bounds above -1, got {list(self.bounds)}")
            object.__setattr__(self, "bounds", (lo, hi))
        if self.categories is not None:
            if self.kind != "categorical":
                raise SpecError(f"{where}: categories are only for categorical columns")
            cats = tuple(str(c) for c in self.categories)
            if len(cats) < 1 or len(set(cats)) != len(cats):
                raise SpecError(f"{where}: categories must be a non-empty list without repeats, got {list(cats)}")
            object.__setattr__(self, "categories", cats)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.role != "target":
            d["role"] = self.role
        if self.bounds is not None:
            d["bounds"] = list(self.bounds)
        if self.categories is not None:
            d["categories"] = list(self.categories)
        if self.nullable:
            d["nullable"] = True
        if self.transform != "none":
            d["transform"] = self.transform
        if self.description:
            d["description"] = self.description
        return d


@dataclass(frozen=True)
class TableSchema:
    columns: tuple[ColumnSpec, ...]
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)  # source, licence...

    @property
    def max_out_of_range(self) -> float:
        """The largest share of a numeric column's values allowed outside its declared bounds (spec key)."""
        return float(self.meta.get("max_out_of_range", DEFAULT_MAX_OUT_OF_RANGE))

    def __post_init__(self):
        object.__setattr__(self, "columns", tuple(self.columns))
        names = [c.name for c in self.columns]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(f"the spec names these columns more than once: {dup}")
        targets = [c for c in self.columns if c.role == "target"]
        if len(targets) != 1:
            raise SpecError(f"the spec needs exactly one target column, found {len(targets)}")
        t = targets[0]
        if t.kind != "categorical" or t.categories is None:
            raise SpecError(f"target '{t.name}' must be categorical with declared categories (e.g. [0, 1])")
        if t.nullable:
            raise SpecError(f"target '{t.name}' cannot be nullable")
        if not self.feature_columns:
            raise SpecError("the spec has no feature columns")

    # --------------------------------------------------------------- views
    @property
    def target(self) -> str:
        return next(c.name for c in self.columns if c.role == "target")

    @property
    def private_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.role == "private"]

    @property
    def public_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.role == "public"]

    @property
    def feature_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.role != "target"]

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise UnknownNameError(f"column '{name}' is not in the spec (columns: {[c.name for c in self.columns]})")

    def require_public(self) -> None:
        """Feature-level methods need at least one public feature column."""
        if not self.public_columns:
            raise SpecError("feature-level DP needs at least one public column; the spec declares none")

    def require_binary_target(self, needed_by: str) -> None:
        """Refuse a target that does not declare exactly two categories, saying what needs them (``needed_by``:
        "the tabular recipe", "the verdict's ML efficacy"), before any row is read."""
        declared = list(self.column(self.target).categories or ())
        if len(declared) != 2:
            raise SpecError(f"target '{self.target}' declares {len(declared)} categories {declared}: {needed_by} "
                            "needs a binary outcome (two categories, e.g. [0, 1]); recode the target as one class "
                            "against the rest, or declare the two categories it takes")

    def with_roles(self, private: list[str]) -> TableSchema:
        """The same schema with exactly ``private`` as private feature columns (others public)."""
        unknown = sorted(set(private) - set(self.feature_columns))
        if unknown:
            raise SpecError(f"unknown feature columns {unknown}; the spec has {self.feature_columns}")
        cols = tuple(c if c.role == "target" else ColumnSpec(**{**c.__dict__, "role": "private" if c.name in private
                                                                 else "public"}) for c in self.columns)
        return TableSchema(cols, self.name, self.meta)

    def select(self, names) -> TableSchema:
        """The same schema narrowed to the columns ``names`` (kept in the spec's order; the target must be one)."""
        keep = set(names)
        return TableSchema(tuple(c for c in self.columns if c.name in keep), self.name, self.meta)

    # --------------------------------------------------------------- (de)serialisation
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableSchema:
        if not isinstance(d, dict) or "columns" not in d:
            raise SpecError("a spec is a mapping with 'columns' (a list) and 'target'")
        cols = []
        if "target" in d:
            target = d["target"] if isinstance(d["target"], dict) else {"name": d["target"]}
            if target.get("role", "target") != "target":
                raise SpecError(f"target '{target.get('name')}' cannot have role {target['role']!r}: whether the "
                                 "label is protected is chosen by the method (label-dp, dp-sgd), not the spec")
            cols.append(_column({"kind": "categorical", **target, "role": "target"}))
        if not isinstance(d["columns"], list):
            raise SpecError(f"'columns' must be a list of column mappings (name, kind, role, ...), got {d['columns']!r}")
        for c in d["columns"]:
            if not isinstance(c, dict):
                raise SpecError(f"each column must be a mapping, got {c!r}")
            cols.append(_column(c))
        meta = {k: v for k, v in d.items() if k not in ("columns", "target", "name")}
        unknown = sorted(set(meta) - set(SPEC_NOTES) - set(SPEC_CHECKS), key=str)
        if unknown:  # e.g. an `epsilon:` the user meant as a setting: silently ignored, it would mislead
            raise SpecError(f"unknown spec key(s) {unknown}: a table spec has 'name', 'target', 'columns', the data "
                            f"checks {list(SPEC_CHECKS)} and the descriptive {list(SPEC_NOTES)}; privacy settings "
                            "(epsilon, delta, ...) are options of the command or fields of the settings, not spec keys")
        limit = meta.get("max_out_of_range", DEFAULT_MAX_OUT_OF_RANGE)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 <= limit <= 1:
            raise SpecError(f"max_out_of_range must be a share in [0, 1] (of a column's values allowed outside its "
                            f"declared bounds), got {limit!r}")
        return cls(tuple(cols), str(d.get("name", "")), meta)

    def to_dict(self) -> dict[str, Any]:
        target = self.column(self.target)
        return {"name": self.name, **self.meta, "target": target.to_dict(),
                "columns": [c.to_dict() for c in self.columns if c.role != "target"]}


#: top-level keys of a table spec that set a data check (kept in ``TableSchema.meta``): ``max_out_of_range`` is the
#: largest share of a numeric column's values allowed outside its declared bounds (more: the table is refused)
SPEC_CHECKS = ("max_out_of_range",)
DEFAULT_MAX_OUT_OF_RANGE = 0.05
#: top-level keys of a table spec that describe it and change nothing (kept in ``TableSchema.meta``)
SPEC_NOTES = ("source", "licence", "license", "note", "notes", "description", "url", "citation", "version")


def _column(d: dict[str, Any]) -> ColumnSpec:
    known = set(ColumnSpec.__dataclass_fields__)
    extra = sorted(set(d) - known)
    if extra:
        raise SpecError(f"column {d.get('name', '?')!r}: unknown keys {extra} (allowed: {sorted(known)})")
    return ColumnSpec(**d)


def load_spec(path: str | Path) -> TableSchema:
    """Read a privacy spec from YAML (.yaml/.yml) or JSON (.json)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"spec file not found: {path}")
    text = path.read_text()
    if not text.strip():
        raise SpecError(f"spec file {path} is empty")
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise SpecError(f"spec file {path}: use .yaml, .yml or .json")
    try:
        d = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise SpecError(f"spec file {path}, line {err.lineno}: not valid JSON ({err.msg})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(f"spec file {path}{where}: not valid YAML ({problem})") from None
    try:
        return TableSchema.from_dict(d)
    except SpecError as err:
        raise SpecError(f"spec file {path}: {err}") from None


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML without anchors/aliases: every column reads on its own."""

    def ignore_aliases(self, data) -> bool:
        return True


def save_spec(schema: TableSchema, path: str | Path) -> None:
    """Write a spec as JSON (.json) or YAML (anything else)."""
    from dpcare.io import write_text

    path = Path(path)
    d = schema.to_dict()
    text = json.dumps(d, indent=2) if path.suffix == ".json" else yaml.dump(d, Dumper=_PlainDumper, sort_keys=False)
    write_text(path, text)
