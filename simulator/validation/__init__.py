"""Validation cases: published measurements the simulator must reproduce (`rlsim validate`).

A case module is any module of this package that registers a provider:

    from simulator.validation import Case, register

    @register
    def cases():
        yield Case("V9 my-case", "tokens/s", published=123.0, predict=lambda: ..., source="arXiv ...")

A provider registered with `@register(overrides=True)` is called with the `--set KEY=VALUE` items of
`rlsim validate` (a tuple, possibly empty) and predicts with them; its cases name the key prefixes
they take (`Case.overridable`). A selected case that does not take a given key is an error, not a
silent no-op (run_cases).

`all_cases()` imports every module of the package (so a new file is picked up without editing
this one) and collects the cases in module-name order, then registration order.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import RlsimError

Provider = Callable[..., Iterable["Case"]]
_PROVIDERS: list[tuple[str, Provider]] = []


class Prediction(float):
    """A predicted value with a `detail` line (e.g. the phase breakdown behind it); a plain float
    returned by `Case.predict` works as well."""

    detail: str

    def __new__(cls, value: float, detail: str = "") -> Prediction:
        obj = super().__new__(cls, value)
        obj.detail = detail
        return obj


@dataclass(frozen=True)
class Case:
    """One published figure and how to predict it. `predict` runs only when the case runs."""

    case: str
    metric: str
    published: float
    predict: Callable[[], float]
    tolerance: float = 0.15     # |error| allowed for the case to count as green
    source: str = ""            # where the published figure comes from
    note: str = ""              # the setup assumptions of the prediction
    # "near": green when |error| <= tolerance; "below" / "above": a published inequality (e.g. "sync
    # scales below 0.9"), green when predicted < published (resp. >=), tolerance unused.
    expect: str = "near"
    # key prefixes of `rlsim validate --set` this case predicts with (e.g. "topology.device."); none:
    # the case takes no override
    overridable: tuple[str, ...] = ()
    # keys under `overridable` that the case's own input refuses whatever their value (V6: the
    # scenario's fallback collective constants, which a run never reads): not taken either
    refused: tuple[str, ...] = ()
    # why the case cannot tell the model from the figure: a constant was set from this same figure (a
    # catalog efficiency from the nccl-tests figure it checks), or it holds by construction; said in
    # the table and counted apart in the total (a validation audit: they inflated the green count)
    in_sample: str = ""

    def takes(self, key: str) -> bool:
        return key_taken(self.overridable, key) and not key_taken(self.refused, key)


def key_taken(prefixes: tuple[str, ...], key: str) -> bool:
    """Whether a --set key falls under one of `prefixes`: "a.b." takes the keys below a.b; "a" takes
    a itself and the keys below it."""
    return any(key.startswith(p) if p.endswith(".") else (key == p or key.startswith(p + ".")) for p in prefixes)


def items_taken(prefixes: tuple[str, ...], overrides: tuple[str, ...],
                refused: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The --set items whose key falls under `prefixes` and not under `refused` (what a provider
    predicts with; a refused one is reported as not taken, as Case.takes says)."""
    from ..overrides import parse_assignment

    return tuple(item for item in overrides
                 if key_taken(prefixes, key := parse_assignment(item)[0]) and not key_taken(refused, key))


def files_named(overrides: tuple[str, ...]) -> tuple[str, ...]:
    """The content digest of every file a --set value names (a device profile, a workload YAML): a
    cache keyed by the items keys on these too, so a file edited between two calls in one process (a
    notebook re-measuring a profile) is read again, not answered from the cache."""
    import hashlib
    from pathlib import Path

    from ..overrides import parse_assignment

    def strings(value: Any) -> Iterable[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for inner in value.values():
                yield from strings(inner)
        elif isinstance(value, list):
            for inner in value:
                yield from strings(inner)

    digests = []
    for item in overrides:
        for text in strings(parse_assignment(item)[1]):
            path = Path(text).expanduser()
            if text and path.is_file():
                digests.append(hashlib.sha256(path.read_bytes()).hexdigest())
    return tuple(digests)


def overridden_device(name: str, overrides: tuple[str, ...]) -> Any:
    """The catalog device `name` with the `--set topology.device.*` items (a bad field or value is
    RlsimError naming its full key)."""
    from ..hardware.devices import device_from_mapping
    from ..overrides import section

    given = section(overrides, "topology.device")
    return device_from_mapping({"base": name, **given} if given else name, source="rlsim validate --set",
                               field_name="topology.device")


@dataclass(frozen=True)
class CaseResult:
    case: str
    metric: str
    predicted: float | None
    published: float
    error: float | None         # signed: predicted / published - 1
    tolerance: float
    source: str = ""
    note: str = ""
    failure: str = ""           # why the prediction could not be made (empty when it ran)
    expect: str = "near"        # see Case.expect
    detail: str = ""            # what the prediction rests on (Prediction.detail), e.g. per-phase times
    in_sample: str = ""         # see Case.in_sample

    @property
    def ok(self) -> bool:
        if self.error is None:
            return False
        if self.expect == "below":
            return self.error < 0
        if self.expect == "above":
            return self.error >= 0
        return abs(self.error) <= self.tolerance

    @property
    def criterion(self) -> str:
        """The green condition in words, for tables."""
        if self.expect == "below":
            return f"must be < {self.published:g}"
        if self.expect == "above":
            return f"must be >= {self.published:g}"
        return f"tol {self.tolerance:.0%}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"case": self.case, "metric": self.metric, "predicted": self.predicted,
                               "published": self.published, "error": self.error, "tolerance": self.tolerance,
                               "within_tolerance": self.ok, "expect": self.expect, "source": self.source,
                               "note": self.note}
        if self.failure:
            out["failure"] = self.failure
        if self.detail:
            out["detail"] = self.detail
        if self.in_sample:
            out["in_sample"] = self.in_sample
        return out


def register(provider: Provider | None = None, *, overrides: bool = False) -> Any:
    """Decorator: add a provider of cases (a function returning or yielding Case objects);
    `@register(overrides=True)`: one called with the --set items (module docstring)."""
    def add(func: Provider) -> Provider:
        func.takes_overrides = overrides   # type: ignore[attr-defined]  # read by all_cases
        _PROVIDERS.append((func.__module__, func))
        return func
    return add if provider is None else add(provider)


def _load_modules() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def all_cases(overrides: tuple[str, ...] = (), selected: Callable[[str], bool] | None = None) -> list[Case]:
    """Every registered case; providers that take overrides predict with `overrides` (KEY=VALUE).
    With `selected` (a case-name test), a provider none of whose cases it selects gets no overrides:
    it neither predicts with them nor checks them (V6 refused a V5 key by its own rule)."""
    _load_modules()
    seen: set[int] = set()
    out: list[Case] = []
    for _module, provider in sorted(_PROVIDERS, key=lambda mp: mp[0]):  # stable: registration order kept
        if id(provider) in seen:
            continue
        seen.add(id(provider))
        takes = getattr(provider, "takes_overrides", False)
        if takes and overrides and selected is not None:
            plain = list(provider(()))
            if not any(selected(case.case) for case in plain):
                out.extend(plain)
                continue
        out.extend(provider(tuple(overrides)) if takes else provider())
    # Published-results order (V1, V3, V4, ...), registration order within one.
    return sorted(out, key=lambda c: _case_key(c.case))


def _case_key(name: str) -> tuple[int, str]:
    head = name.split()[0] if name else ""
    return (int(head[1:]), "") if head[:1] == "V" and head[1:].isdigit() else (10**6, head)


def run_case(case: Case) -> CaseResult:
    """Predict one case. A missing dependency or a user-type error is reported as a failure of
    the case (predicted None) rather than hiding the case; anything else propagates."""
    try:
        raw = case.predict()
        predicted = float(raw)
    except (RlsimError, ImportError) as exc:
        return CaseResult(case.case, case.metric, None, case.published, None, case.tolerance, case.source,
                          case.note, failure=f"{type(exc).__name__}: {exc}", expect=case.expect,
                          in_sample=case.in_sample)
    error = predicted / case.published - 1.0
    return CaseResult(case.case, case.metric, predicted, case.published, error, case.tolerance, case.source,
                      case.note, expect=case.expect, detail=getattr(raw, "detail", ""), in_sample=case.in_sample)


def _takers_fix(key: str, every: list[Case], refusing: list[str]) -> str:
    """Where a refused --set key goes: the families whose cases take it, else the keys the refusing
    cases take."""
    families = sorted({c.case.split(" ", 1)[0] for c in every if c.takes(key)}, key=lambda f: (len(f), f))
    if families:
        return f"select cases that take it with --case (taken by {', '.join(families)})"
    taken = sorted({p for c in every if c.case in refusing for p in c.overridable})
    return f"no case takes it; the refusing cases take: {', '.join(taken) or 'no --set keys'}"


def _selects(text: str, case: str) -> bool:
    """A family id (V3) selects that family's cases, by the name's first word (a substring match took
    the deepseek-v3 rows of V6 with V3); any other text, the cases whose name contains it."""
    if re.fullmatch(r"v\d+", text.strip().lower()):
        return case.split(" ", 1)[0].lower() == text.strip().lower()
    return text.lower() in case.lower()


def run_cases(select: str | Iterable[str] | None = None, progress: Callable[[int, int], None] | None = None,
              overrides: tuple[str, ...] = ()) -> list[CaseResult]:
    """Run every registered case (or those whose name contains `select`, or any of several texts),
    predicting with the `overrides` (KEY=VALUE items); ``progress(done, total)`` is called after
    each (the terminal bar of `rlsim validate`). RlsimError when a selected case does not take a key."""
    from ..overrides import parse_assignment

    texts = None if select is None else [select] if isinstance(select, str) else list(select)

    def chosen(name: str) -> bool:
        return not texts or any(_selects(t, name) for t in texts)

    every = all_cases(overrides, chosen)
    cases = [c for c in every if chosen(c.case)]
    for item in overrides:
        key = parse_assignment(item)[0]
        refusing = [c.case for c in cases if not c.takes(key)]
        if refusing:
            raise RlsimError(f"{len(refusing)} selected case(s) do not take --set {key}, e.g. {refusing[0]!r}",
                             field=key, fix=_takers_fix(key, every, refusing))
    results = []
    for case in cases:
        results.append(run_case(case))
        if progress is not None:
            progress(len(results), len(cases))
    return results


__all__ = ["Case", "CaseResult", "Prediction", "all_cases", "items_taken", "key_taken", "overridden_device", "register",
           "run_case", "run_cases"]
