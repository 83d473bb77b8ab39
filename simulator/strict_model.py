"""The base of every pydantic model that reads user input (scenario sections, parameter sets,
planner settings, device profiles): unknown keys refused, frozen once validated, and two rules
pydantic's lax mode does not apply by itself (issue 14, classes 2 and 5):

- every float is finite: ``.inf`` / ``.nan`` pass a ``ge=0`` bound but crash or mislead later
  (an infinite staleness overflowed an integer conversion in the runner);
- ``true`` / ``false`` are not numbers: lax mode reads ``iterations: true`` as 1;
- a quoted number is text where only a number goes: lax mode reads ``prompts_per_step: '64'`` as 64
  (a field whose validator reads text first, a bandwidth '25GB/s', still takes it);
- text or a number is not a flag: lax mode reads ``partial_rollout: "yes"`` (or 1) as true.
"""
from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .units import text_number_fix


def takes_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold a bool (bool itself, Any, or a union with either)."""
    if annotation is bool or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return takes_bool(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(takes_bool(arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return any(isinstance(arg, bool) for arg in typing.get_args(annotation))
    return False


class _BoolGiven:
    """A true/false given where a number belongs: no field type accepts it, so pydantic's own error
    names the full dotted field, and its repr shows what was written."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{str(self.value).lower()}, a bool: write a number"


def _holds_only(annotation: Any, leaf: Any) -> bool:
    """Whether every type a field of this type may hold (None aside) passes ``leaf``."""
    if leaf(annotation):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _holds_only(typing.get_args(annotation)[0], leaf)
    if origin is typing.Union or origin is types.UnionType:
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return bool(args) and all(_holds_only(arg, leaf) for arg in args)
    return False


def number_only(annotation: Any) -> bool:
    """Whether a field of this type holds only a number (int or float, optionally None): a quoted
    '64' there is text, not the number (lax mode read prompts_per_step: '64' as 64)."""
    return _holds_only(annotation, lambda leaf: leaf in (int, float))


def bool_only(annotation: Any) -> bool:
    """Whether a field of this type holds only true / false (optionally None): a quoted 'yes' or a 1
    there is not a flag (lax mode read partial_rollout: "yes" as true and "no" as false)."""
    return _holds_only(annotation, lambda leaf: leaf is bool)


class _NotAFlag:
    """Text or a number given where only true / false goes: pydantic's own error names the full
    dotted field, and its repr says what was written."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{self.value!r}, {'text' if isinstance(self.value, str) else 'a number'}: write true or false"


_PASSES_VALUE_ON = "__rlsim_passes_value_on__"


def passes_value_on(validator: Any) -> Any:
    """Mark a "before" field validator that checks its value and hands it on as given (an
    applicability gate), so its fields stay under the quoted-number rule: it reads no text."""
    setattr(validator, _PASSES_VALUE_ON, True)
    return validator


def _fields_holding_only(cls: type[BaseModel], holds: Any) -> frozenset[str]:
    """The fields of a model class whose type passes ``holds`` and no validator of which reads the
    value first (a "before" validator not marked passes_value_on: a unit parser reads text)."""
    parsed = {name for d in cls.__pydantic_decorators__.field_validators.values()
              if d.info.mode == "before" and not getattr(getattr(d.func, "__func__", d.func), _PASSES_VALUE_ON, False)
              for name in d.info.fields}
    return frozenset(k for k, f in cls.model_fields.items() if k not in parsed and holds(f.annotation))


@functools.cache
def _number_fields(cls: type[BaseModel]) -> frozenset[str]:
    """The fields that take only a number: one walk of a class's declarations, not one per validation."""
    return _fields_holding_only(cls, number_only)


@functools.cache
def _flag_fields(cls: type[BaseModel]) -> frozenset[str]:
    """The fields that take only true / false (as _number_fields)."""
    return _fields_holding_only(cls, bool_only)


class _TextGiven:
    """A quoted number given where a number belongs: pydantic's own error names the full dotted
    field, and its repr says what was written."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{self.value!r}, text: {text_number_fix(self.value)}"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _bool_is_not_a_number(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        fields = cls.model_fields
        wrong = [k for k, v in data.items()
                 if isinstance(v, bool) and k in fields and not takes_bool(fields[k].annotation)]
        # text where only a number goes, unless a validator of the field reads text first (units: '25GB/s')
        quoted = [k for k, v in data.items() if isinstance(v, str) and k in _number_fields(cls)]
        # text or a number where only true / false goes ('yes', 1)
        flags = [k for k, v in data.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)
                 and k in _flag_fields(cls)]
        if not (wrong or quoted or flags):
            return data
        return {**data, **{k: _BoolGiven(data[k]) for k in wrong}, **{k: _TextGiven(data[k]) for k in quoted},
                **{k: _NotAFlag(data[k]) for k in flags}}

    def set_off_default(self, keys: typing.Iterable[str]) -> list[str]:
        """Of ``keys``, those given and away from their defaults, sorted: the ones a rule that makes
        them inapplicable must refuse (at their defaults, as a whole dump gives them, they change nothing)."""
        fields = type(self).model_fields
        return sorted(k for k in keys if k in self.model_fields_set and getattr(self, k) != fields[k].default)
