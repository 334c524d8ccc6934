"""The leaderboard's records: what it reads and writes, as typed values instead of string-keyed dicts.

* :class:`Entry`: one ``--entries`` item, what to put on the board;
* :class:`EntryResult`: one row of the board (a ``results.json`` row), however it was obtained;
* :class:`Report`: a row's ``report.json`` (its figures, their example counts and intervals);
* :class:`Meta`: a row's ``meta.json`` (how, where and from what the figures were made).

Each record reads and writes the JSON objects the files hold (``from_json``/``to_json``): an
optional field that is ``None`` is absent from the object, and keys a record does not model are
kept in ``extra`` as read, so a committed file read and written again gives the same object (and,
written by :func:`parlai_empathy.evidence.artifacts.write_json`, the same bytes). A field given in the file
as ``null`` is kept that way too. Records are frozen: a step that adds figures returns a new record
(:func:`dataclasses.replace`), so a row never changes under a reader holding it.
"""

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

# ``extra`` and ``outputs`` are the record's own; every other field is a JSON key of the same name
_OWN = ('extra', 'outputs')


def _from_json(cls, obj: Mapping, where: str, required: Tuple[str, ...]):
    """``cls`` from a JSON object: its fields by name, the other keys (and nulls) in ``extra``."""
    if not isinstance(obj, Mapping):
        raise ValueError(f'{where}: not a JSON object')
    missing = [key for key in required if key not in obj]
    if missing:
        raise ValueError(f'{where}: no {missing[0]!r} field')
    names = {f.name for f in dataclasses.fields(cls)} - set(_OWN)
    known = {key: value for key, value in obj.items() if key in names and value is not None}
    extra = {key: value for key, value in obj.items() if key not in known}
    return cls(**known, extra=extra)


def _to_json(record) -> Dict[str, Any]:
    out = {
        f.name: getattr(record, f.name)
        for f in dataclasses.fields(record)
        if f.name not in _OWN and getattr(record, f.name) is not None
    }
    out.update(record.extra)
    return out


@dataclass(frozen=True)
class Entry:
    """``name=path``: a model file, a saved ``eval_model`` report (.json), saved world logs (.jsonl),
    or a row of an earlier board (``results.json`` or ``results.json#ROW``)."""

    name: str
    path: str
    extra_args: Tuple[str, ...] = ()  # eval_model arguments for this entry alone

    @property
    def source(self) -> str:
        if '#' in self.path or os.path.basename(self.path) == 'results.json':
            return 'leaderboard'
        if self.path.endswith('.jsonl'):
            return 'world_logs'
        if self.path.endswith('.json') and not os.path.exists(self.path + '.opt'):
            return 'report'
        return 'model'


@dataclass(frozen=True)
class Report:
    """A row's ``report.json``: metric name -> figure (``values``), with the example count
    (``exs``) and 95 % interval (``ci95``, [low, high]) of each where known, the commands behind
    them, the settings notes, and a classifier's per-label figures."""

    values: Dict[str, float]
    entry: Optional[str] = None
    kind: Optional[str] = None
    exs: Optional[Dict[str, int]] = None
    commands: Optional[List[str]] = None
    notes: Optional[Dict[str, str]] = None
    ci95: Optional[Dict[str, List[float]]] = None
    per_label: Optional[Dict[str, Dict[str, float]]] = None
    per_label_tuned: Optional[Dict[str, Dict[str, float]]] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def value(self, key: str) -> Optional[float]:
        return self.values.get(key)

    def count(self, key: str) -> Optional[int]:
        """How many examples ``key`` was measured on (``None`` where the report does not say)."""
        return (self.exs or {}).get(key)

    def interval(self, key: str) -> Optional[Tuple[float, float]]:
        low_high = (self.ci95 or {}).get(key)
        return None if low_high is None else (low_high[0], low_high[1])

    @classmethod
    def from_json(cls, obj: Mapping, where: str = 'report') -> 'Report':
        if isinstance(obj, Mapping) and not isinstance(obj.get('values'), Mapping):
            raise ValueError(f'{where}: no "values" object')
        return _from_json(cls, obj, where, ('values',))

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)


@dataclass(frozen=True)
class Meta:
    """A row's ``meta.json``: the code, machine and command that evaluated it, when and in how many
    seconds, on how many examples; its training (the validation ``curve``, the evaluated model's
    updates) and the plan that made it (``profile``: which machine's plan); a published row's
    released file (repository, commit, path, sha256), label and alignment counts."""

    entry: Optional[str] = None
    code: Optional[Dict[str, Any]] = None
    machine: Optional[Dict[str, Any]] = None
    evaluated: Optional[str] = None
    evaluation_seconds: Optional[float] = None
    evaluation_command: Optional[str] = None
    examples: Optional[int] = None
    training: Optional[Dict[str, Any]] = None
    plan: Optional[Dict[str, Any]] = None
    # a published row (another paper's released outputs): the file, its label, its alignment counts
    released: Optional[Dict[str, str]] = None
    label: Optional[str] = None
    alignment: Optional[Dict[str, int]] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return 0.0 if self.evaluation_seconds is None else self.evaluation_seconds

    @property
    def curve(self) -> List[Dict[str, float]]:
        return (self.training or {}).get('curve') or []

    @property
    def profile(self) -> str:
        return (self.plan or {}).get('profile', '')

    @property
    def gpu(self) -> Optional[str]:
        return (self.machine or {}).get('gpu')

    @classmethod
    def from_json(cls, obj: Mapping, where: str = 'meta') -> 'Meta':
        return _from_json(cls, obj, where, ())

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)


@dataclass(frozen=True)
class EntryResult:
    """One row of the board, as ``results.json`` holds it: figures (``values``), their example
    counts (``exs``), the commands that made them, and what each way of obtaining a row adds (a
    model's ``kind`` and world logs, a classifier's per-label figures, a project row's ``paper``
    figures on its report's scale). ``outputs``, the per-example rows for the evidence, stay in
    memory: they are not part of ``results.json``."""

    name: str
    values: Dict[str, float]
    commands: Optional[List[str]] = None
    path: Optional[str] = None
    source: Optional[str] = None  # Entry.source; a row gathered from project artifacts has none
    kind: Optional[str] = None  # 'ranker', 'generator', 'classifier' or 'published' (another paper's outputs)
    exs: Optional[Dict[str, int]] = None
    label: Optional[str] = None  # what a published row's name stands for ("released outputs of ...")
    alignment: Optional[Dict[str, int]] = None  # a published row's outputs matched with ED test, and not
    seconds: Optional[float] = None
    notes: Optional[Dict[str, str]] = None
    paper: Optional[Dict[str, float]] = None
    ci95: Optional[Dict[str, List[float]]] = None  # bootstrap 95 % interval of each figure that has one
    world_logs: Optional[str] = None
    per_label: Optional[Dict[str, Dict[str, float]]] = None
    per_label_tuned: Optional[Dict[str, Dict[str, float]]] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    outputs: Optional[List[Dict[str, Any]]] = field(default=None, compare=False, repr=False)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def value(self, key: str) -> Optional[float]:
        return self.values.get(key)

    def paper_value(self, key: str) -> Optional[float]:
        return (self.paper or {}).get(key)

    @classmethod
    def from_json(cls, obj: Mapping, where: str = 'results.json row') -> 'EntryResult':
        return _from_json(cls, obj, where, ('name',))

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)
