"""The one exception type for errors a user can cause (bad input, impossible layout)."""
from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any


class RlsimError(ValueError):
    """A user-caused error. The message names the file, the field and the fix.

    The CLI prints it without a traceback and exits 2.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None,
                 fix: str | None = None, related: Iterable[str] = ()) -> None:
        self.message = message
        self.source = source
        self.field = field
        self.fix = fix
        self.fields: list[str] = [field] if field else []
        # fields a cross-field check read beside the one at fault (CrossFieldError): where one of them
        # was given is where the conflict was written
        self.related: list[str] = list(related)
        parts = []
        if source:
            parts.append(str(source))
        if field:
            parts.append(f"field '{field}'")
        head = ": ".join(parts)
        text = f"{head}: {message}" if head else message
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)

    def with_source(self, source: str) -> RlsimError:
        """The same error, naming ``source`` (the file or input it came from)."""
        return self.reworded(self.message, self.fix, source=source)

    def reworded(self, message: str, fix: str | None, *, source: str | None = None) -> RlsimError:
        """The same error (its source unless ``source`` is given, its field and fields) saying
        ``message`` with ``fix``: a caller that knows more adds it."""
        out = RlsimError(message, source=source or self.source, field=self.field, fix=fix, related=self.related)
        out.fields = list(self.fields)
        return out


class RefusedBeforeTiming(RlsimError):
    """A refusal of a candidate layout by a check made before any of its steps is timed (memory, the
    rollout phase beside it, the pools, room beside a tail: planner.evaluate.TrainingEvaluator._judge;
    a re-plan's LlmCosts.accept_train_layout before its train_step_cost): a planner search charges it
    PlannerParams.refused_cost_fraction of an evaluation. A refusal of another kind (raised while
    timing, or by a check after a step was timed) is charged as a timed candidate."""

    @classmethod
    def of(cls, exc: RlsimError) -> RefusedBeforeTiming:
        """``exc`` (its message, source, field, fix and fields) as a refusal before timing."""
        out = cls(exc.message, source=exc.source, field=exc.field, fix=exc.fix, related=exc.related)
        out.fields = list(exc.fields)
        return out

    def as_timed(self) -> RlsimError:
        """The same refusal as one charged as a timed candidate (a step was timed before it)."""
        return self.reworded(self.message, self.fix)


class ReadPastError(RlsimError):
    """A key given away from its default that the scenario reads nowhere (scenario._read_past_keys):
    compare runs the kind it is read past under without it, and says so (api.compared_scenarios)."""


class CrossFieldError(ValueError):
    """A validator's error that turns on other fields too: ``siblings`` are the names of the fields
    it read, beside the validated field (a field validator) or, with ``at`` (a model validator: the
    field at fault, under the model), inside the validated model. validation_error reports the error
    at that field and lists the siblings as its ``related``, so the error names the file or --set
    item that gave any of them, not only the one at fault. ``fix``, where given, is the error's fix
    (the generic one else), as an RlsimError's."""

    def __init__(self, message: str, *siblings: str, at: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.siblings = siblings
        self.at = at
        self.fix = fix


@contextmanager
def raised_from(source: str | None) -> Iterator[None]:
    """An RlsimError raised inside that names no file gets ``source``: a check that runs deep in a
    model (a layout that does not fit, a head count a TP size does not divide) knows the field, and
    the caller knows which scenario it was reading."""
    try:
        yield
    except RlsimError as exc:
        if exc.source or not source:
            raise
        raise exc.with_source(source) from None


def set_item_for(fields: list[str], items: list[str]) -> str | None:
    """The ``--set KEY=VALUE`` item that gave the fields at fault (None: a file gave one of them): a
    field is the item's where it is the item's key, lies under it (the key set a whole section) or
    above it (the key added an unknown sub-key)."""
    # a list item as errors name it (failures[0].at_s is failures.0.at_s: overrides.parse_assignment)
    keys = [(re.sub(r"\[(\d+)\]", r".\1", str(item).split("=", 1)[0].strip()), str(item)) for item in items]
    found = []
    for name in fields:
        hit = [item for key, item in keys
               if name == key or name.startswith(key + ".") or key.startswith(name + ".")]
        if not hit:
            return None
        below = [item for key, item in keys if key.startswith(name + ".")]
        # the items that filled a section in together share its fault (the multi-turn section by three
        # items); else the last item given wins, as it does when applied
        found.append(", ".join(dict.fromkeys(below)) if len(below) == len(hit) > 1 else hit[-1])
    return found[0] if fields and len(set(found)) == 1 else None


def blamed_on_set(exc: RlsimError, items: list[str], flag: str = "--set") -> RlsimError:
    """``exc`` naming the ``flag`` item (``--set``, calibrate's ``--predict``) that gave its field, over
    the file it was applied to: a value a command line gave is not the scenario file's to fix."""
    source = str(exc.source or "")
    if source.startswith(f"{flag} "):   # blamed on its item already (simulate's overrides)
        return exc
    if source.startswith("--") and source.split()[0].rstrip(":") != flag:
        return exc   # another flag's own fault (--grid's repeated value): not the item under its key's
    item = set_item_for(exc.fields, items)
    if item is None and exc.related:   # a conflict: the item that gave one side of it
        item = next((hit for name in exc.related if (hit := set_item_for([name], items))), None)
    if item is None:
        return exc
    over = exc.source if exc.source and flag not in exc.source else None   # not a --set already
    return exc.with_source(f"{flag} {item}" + (f" (over {over})" if over else ""))


# pydantic's loc parts naming a union branch or a validator, not a field ("function-after[...]",
# "literal['colocated']", a tagged-union tag such as "colocated"): dropped from dotted paths.
_LOC_NOISE = ("function-", "literal[", "union[", "tagged-union[", "json-or-python[", "lax-or-strict[")


def _dotted(prefix: str, loc: tuple[Any, ...], skip: frozenset[str]) -> str:
    parts = [str(p) for p in loc
             if not str(p).startswith(_LOC_NOISE) and "[" not in str(p) and str(p) not in skip]
    return ".".join(p for p in (prefix, *parts) if p)


def _shown(value: Any) -> str:
    """The offending input, short: mappings and long values are left out (their keys are in the path)."""
    if isinstance(value, (dict, list)) or value is _MISSING:
        return ""
    text = repr(value)
    return f" (got {text})" if len(text) <= 80 else ""


_MISSING = object()


def _model_classes(annotation: Any) -> list[type]:
    """The pydantic models a field's annotation can hold (through Optional, unions, lists, dict
    values and Annotated)."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _model_classes(arg)]


def _fields_beside(model: Any, loc: tuple[Any, ...]) -> set[str]:
    """The field names a key at ``loc`` may take: the fields of the models reached from ``model``
    along loc's parent parts. A part no candidate declares (a union's tag, a list index, a dict key,
    a validator's name) keeps the candidates; a field that holds no model ends the walk. A field
    validated by a registry instead of its annotation (Scenario.schedule) names its registry in the
    class's ``field_models``."""
    return {name for cls in _models_at(model, loc) for name in cls.model_fields}


def _models_at(model: Any, loc: tuple[Any, ...], data: Any = None) -> list[Any]:
    """The models that may hold the key at ``loc`` (_fields_beside's walk). With ``data``, the input
    validated, a registry's section names its model by its tag (a schedule's `kind: colocated`)."""
    current: list[Any] = [model]
    for part in loc[:-1]:
        data = data.get(part) if isinstance(data, Mapping) else None
        declared = [(cls, name, field) for cls in current for name, field in cls.model_fields.items()
                    if part in (name, field.alias)]
        if declared:
            registry = {tag: inner for cls, name, _ in declared
                        for tag, inner in getattr(cls, "field_models", {}).get(name, {}).items()}
            tagged = [registry[v] for v in (data.values() if isinstance(data, Mapping) else ())
                      if isinstance(v, str) and v in registry]
            current = tagged[:1] or [inner for cls, name, field in declared
                                     for inner in (_model_classes(field.annotation) or list(registry.values()))]
    return current


def counted(count: int, noun: str) -> str:
    """'1 device', '0 devices', '8 devices': a count with its noun in the right number."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def one_typo_from(name: str, names: Iterable[str]) -> str:
    """"; did you mean 'x'?" where ``name`` is one typo away from one of ``names`` ('' else): similar
    (difflib) and a few edits apart, so a different word made of the same parts is not offered
    (max_position_embeddings is not a typo of position_embedding_type)."""
    close = [match for match in difflib.get_close_matches(str(name), sorted(names), n=3, cutoff=0.75)
             if _edits(str(name), match) <= max(TYPO_EDITS, len(str(name)) // 4)]
    return f"; did you mean '{close[0]}'?" if close else ""


# The fewest letter edits a typo may be (a longer name may be a quarter of its length away).
TYPO_EDITS = 3


def _edits(first: str, second: str) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions from one to the other."""
    previous = list(range(len(second) + 1))
    for i, char in enumerate(first, 1):
        current = [i]
        for j, other in enumerate(second, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other)))
        previous = current
    return previous[-1]


def _keys_beside(model: Any, loc: tuple[Any, ...], skip: frozenset[str], data: Any = None) -> list[str]:
    """The keys an unknown key at ``loc`` could have been, as its dotted path takes them: the keys
    beside it and, where a skipped part (a wrapper such as the planner's ``params``) flattens a level,
    that level's own fields too; ``data``, the input, names a registry's model (_models_at). Sorted;
    none without ``model``."""
    if model is None or not loc:
        return []
    names = {name for cls in _models_at(model, loc, data) for name in _keys_of(cls)}
    for at, part in enumerate(loc[:-1]):
        if str(part) in skip:
            names |= {name for cls in _models_at(model, loc[:at + 1], data) for name in _keys_of(cls)}
    return sorted(names - skip - {"source"})


def _keys_of(cls: Any) -> Iterable[str]:
    """The keys a model takes: its fields, or those its kind accepts where one class holds every
    kind's knobs and gates them (the schedules' ``accepts()``)."""
    accepts = getattr(cls, "accepts", None)
    return accepts() if callable(accepts) else cls.model_fields


# pydantic's scalar type errors ("bool_type", "int_parsing", ...: the type named before the suffix): what
# the field is, what it takes and an example value, for a mapping given where a scalar goes.
_SCALAR_TYPES = {"bool": ("a boolean", "true or false", "true"), "int": ("an integer", "a whole number", "1"),
                 "float": ("a number", "a number", "1.0"), "string": ("a string", "a name", "NAME")}
# pydantic's bound errors: the ctx key of the bound and the words for it.
_BOUNDS = {"greater_than": ("gt", "greater than"), "greater_than_equal": ("ge", "greater than or equal to"),
           "less_than": ("lt", "less than"), "less_than_equal": ("le", "less than or equal to")}


def _plain_words(err: Mapping[str, Any], where: str, model: Any, skip: frozenset[str],
                 data: Any = None) -> tuple[str, str] | None:
    """(message, fix) for the errors pydantic words generically: a bound ("Input should be greater than 0"
    said neither the field's rule nor what to write) and an unknown key ("Extra inputs are not
    permitted": which keys are known?). None for the others."""
    kind = str(err.get("type", ""))
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        bound = _bound_text((err.get("ctx") or {}).get(key))
        return f"must be {words} {bound}", f"set {where} to a value {words} {bound}"
    scalar = _SCALAR_TYPES.get(kind.removesuffix("_parsing").removesuffix("_type"))
    if scalar is not None and isinstance(err.get("input"), Mapping):   # `--set a.flag.x=1` made a mapping of it
        keys = ", ".join(map(str, err["input"])) or "none"
        return (f"{where} is {scalar[0]}, not a mapping: no key goes under it (given: {keys})",
                f"give {where} itself {scalar[1]} ({where}={scalar[2]}), no key under it")
    if kind == "extra_forbidden":
        loc = tuple(err.get("loc", ()))
        message = f"unknown field '{loc[-1] if loc else where}'" + did_you_mean(err, model)
        keys = _keys_beside(model, loc, skip, data)
        return message, (f"use one of: {', '.join(keys)}" if keys else "")
    return None


def _bound_text(bound: Any) -> str:
    """A bound as written: 0, not the 0.0 of a float field; 0.5 as is."""
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def did_you_mean(err: Mapping[str, Any], model: Any) -> str:
    """"; did you mean 'x'?" for an unknown key one typo away from a field its model declares ('' else)."""
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "union_tag_invalid":   # a kind one typo from a registered one (schedule.kind)
        ctx = err.get("ctx") or {}
        tags = [t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(",") if t.strip()]
        return one_typo_from(str(ctx.get("tag", "")), tags)
    if model is None or err.get("type") != "extra_forbidden" or not loc:
        return ""
    return one_typo_from(str(loc[-1]), _fields_beside(model, loc))


def _typo_target(err: Mapping[str, Any], model: Any, prefix: str, skip: frozenset[str]) -> str:
    """The dotted path of the field an unknown key is one typo from (did_you_mean's name beside the
    key, at the key's own level: taken from its loc, as a key may hold a dot itself); '' where none is."""
    meant = did_you_mean(err, model) if err.get("type") == "extra_forbidden" else ""
    if not meant:
        return ""
    loc = tuple(err.get("loc", ()))
    return _dotted(prefix, (*loc[:-1], meant.removeprefix("; did you mean '").removesuffix("'?")), skip)


def _fold_missing_typos(by_field: dict[str, list[str]], own_fix: dict[str, str], typos: Mapping[str, str],
                        missing: set[str]) -> None:
    """A required key reported missing because it was written one typo off (``typos``: the unknown
    key's dotted path -> the dotted path of the field it is one typo from) is the typo's error, not a
    second one: its 'Field required' is dropped and the typo's fix is the rename."""
    for where, target in typos.items():
        if target in missing and target in by_field:
            del by_field[target]
            own_fix[where] = f"rename {where} to {target}"


def validation_error(exc: Any, *, source: str | None = None, prefix: str = "",
                     fix: str = "see docs/scenario-reference.md for the fields and allowed values",
                     skip: frozenset[str] = frozenset(), model: Any = None, data: Any = None) -> RlsimError:
    """One RlsimError listing EVERY error of a pydantic ValidationError, each as
    `prefix.dotted.field: message (got value)`, with the dotted path that `--set` accepts.

    ``skip`` names loc parts that are not fields (e.g. the tags of a discriminated union); ``model``,
    the pydantic class validated, lets an unknown key name the declared field it is a typo of and the
    keys it could have been (``data``, the input validated, picks a registry's model: the schedule's kind)."""
    by_field: dict[str, list[str]] = {}   # a union's branches fail on the same field: one line each field
    shown: dict[str, str] = {}
    related: list[str] = []
    own_fix: dict[str, str] = {}   # a validator's RlsimError: its message and fix, not its text nested
    typos: dict[str, str] = {}     # an unknown key -> the field it is one typo from
    missing: set[str] = set()
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, CrossFieldError):
            base = loc if cause.at else loc[:-1]
            related += [_dotted(prefix, (*base, *name.split(".")), skip) for name in cause.siblings]
            loc += tuple(cause.at.split(".")) if cause.at else ()
        if err.get("type") in ("union_tag_invalid", "union_tag_not_found"):   # the tag field itself
            loc += (str((err.get("ctx") or {}).get("discriminator", "")).strip("'"),)
        where = _dotted(prefix, loc, skip) or prefix or "input"
        if err.get("type") == "missing":
            missing.add(where)
        if err.get("type") == "missing" and "." in where:
            # a required key of a section: whoever gave the section left it out
            related.append(where.rpartition(".")[0])
            own_fix.setdefault(where, f"give {where} (docs/scenario-reference.md)")
        typo_of = _typo_target(err, model, prefix, skip)
        if typo_of:
            typos[where] = typo_of
        worded = isinstance(cause, (RlsimError, CrossFieldError)) and cause.fix is not None   # its own fix
        message = cause.message if isinstance(cause, RlsimError) or worded else str(err.get("msg", "invalid"))
        if worded and cause.fix:
            own_fix.setdefault(where, cause.fix)
        plain = _plain_words(err, where, model, skip, data)
        if plain is not None:
            message = plain[0]
            if plain[1]:
                own_fix.setdefault(where, plain[1])
        else:
            message = message.removeprefix("Value error, ") + did_you_mean(err, model)
        by_field.setdefault(where, []).append(message)
        shown.setdefault(where, "" if isinstance(cause, RlsimError) or worded else _shown(err.get("input", _MISSING)))
    _fold_missing_typos(by_field, own_fix, typos, missing)
    items = [(where, " or ".join(dict.fromkeys(msgs)) + shown[where]) for where, msgs in by_field.items()]
    if len(items) == 1:
        out = RlsimError(items[0][1], source=source, field=items[0][0], fix=own_fix.get(items[0][0], fix))
    else:   # each with its own fix, where it has one (the generic one closes the list)
        listed = "; ".join(f"field '{where}': {text}" + (f" (fix: {own_fix[where]})" if where in own_fix else "")
                           for where, text in items)
        out = RlsimError(f"{len(items)} errors: {listed}", source=source, fix=fix)
        out.field = items[0][0] if items else (prefix or None)
        out.fields = [where for where, _ in items]
    out.related = list(dict.fromkeys(related))
    return out
