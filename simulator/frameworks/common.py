"""What every framework importer shares: reading a Hydra-style YAML with its command-line overrides,
classifying each framework key (mapped / ignored / unsupported / unknown) from a data table, model
ids to model presets, and sizing the topology from the config's GPU counts.

A framework module (verl.py, nemo_rl.py) holds its key table (``RULES``: dotted key -> Rule, a key
ending in ``.*`` covers a whole section) and a builder from the flat config to an rlsim scenario
mapping. Nothing here runs a simulation; the result is validated by ``scenario.load_scenario``.
"""
from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import RlsimError, one_typo_from
from ..overrides import parse_assignment, set_dotted
from ..presets import read_yaml, resolve
from ..scenario import deep_merge

Status = Literal["mapped", "ignored", "unsupported"]
_NO_NEUTRAL = object()

# The hardware is not in a framework config. dgx-h100 is assumed when --topology is not given: the
# machine of NeMo RL's published v0.5 tables (published-results.md V6) and of most verl examples.
DEFAULT_TOPOLOGY = "dgx-h100"


@dataclass(frozen=True)
class Rule:
    """How one framework key reaches rlsim. ``target`` names the rlsim key (mapped keys); an
    unsupported key whose value equals ``neutral`` behaves as rlsim models it and is listed as ignored."""
    status: Status
    reason: str
    target: str | None = None
    neutral: Any = _NO_NEUTRAL


# Reasons several frameworks' tables give.
OPTIMIZER_SETTINGS = "optimizer hyper-parameters: no effect on step time"
SAMPLING_SETTINGS = "sampling parameters: the same per-token cost (lengths come from workload.response_length)"


# What a multi-turn import cannot read from any framework's config (docs/guides/frameworks.md)
MULTI_TURN_NOTE = ("multi-turn: the tools' seconds and their answers' tokens are not in a framework's config: give "
                   "--set workload.multi_turn.tool_latency_s=S --set workload.multi_turn.observation_tokens=T (means; "
                   "_sigma for their spread, mean_turns for turns under the cap)")


# vLLM's speculative_config methods rlsim prices -> workload.inference.speculative_method (vLLM 0.11
# config/speculative.py: SpeculativeMethod; the per-model MTP names of MTP_MODEL_TYPES it maps to mtp).
# draft_model: vLLM 0.11's V1 engine refuses it (engine/arg_utils.py); ngram, medusa, mlp_speculator:
# not modelled.
VLLM_SPECULATIVE_METHODS = {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "deepseek_mtp": "mtp",
                            "mimo_mtp": "mtp", "glm4_moe_mtp": "mtp", "ernie_mtp": "mtp", "qwen3_next_mtp": "mtp",
                            "longcat_flash_mtp": "mtp"}
# The speculative_config keys the import reads: what drafts, how many tokens, the draft's checkpoint (an
# EAGLE head's or the MTP weights: priced as the method's head of the target's shape) and its TP.
VLLM_SPECULATIVE_KEYS = ("method", "num_speculative_tokens", "model", "draft_tensor_parallel_size",
                         "disable_padded_drafter_batch")
# The speculative_config flags read one for one onto workload.inference's keys: vLLM 0.11's
# disable_padded_drafter_batch (config/speculative.py SpeculativeConfig, default False; true: the drafter's
# first forward over the tokens a step accepted, eagle.py prepare_inputs, not the k + 1 verified positions)
VLLM_SPECULATIVE_FLAGS = {"disable_padded_drafter_batch": "speculative_disable_padded_drafter_batch"}
SPECULATION_NOTE = ("speculative decoding: the rate at which the target accepts a drafted token is in no framework "
                    "config (it depends on the draft, the data and the sampling temperature): give --set "
                    "workload.inference.speculative_acceptance_rate=A (from a measured mean of L tokens a step: "
                    "(1 - A^(k+1)) / (1 - A) = L); the run refuses to start without it")


def vllm_speculation(config: Mapping[str, Any], key: str, source: str, tp: int | None = None) -> dict[str, Any]:
    """vLLM's speculative_config (a mapping, given at ``key``) -> workload.inference's speculative keys:
    the method and num_speculative_tokens (the acceptance rate is left to the user: SPECULATION_NOTE).
    RlsimError, naming the key, for a method rlsim does not price, one left to vLLM's guess from the
    draft's name, a draft depth left to the draft's config, or a draft on other TP ranks than the target."""
    method = config.get("method")
    if method is None:
        raise RlsimError("a speculative_config without a method: vLLM guesses it from the draft's name and config, "
                         "which rlsim does not read", source=source, field=f"{key}.method",
                         fix=f"give {key}.method: eagle, eagle3 or mtp")
    if method not in VLLM_SPECULATIVE_METHODS:
        why = ("vLLM 0.11's V1 engine refuses it (engine/arg_utils.py: 'Draft model speculative decoding is not "
               "supported yet')" if method == "draft_model" else "it is not modelled")
        raise RlsimError(f"speculative method {method!r}: {why}", source=source, field=f"{key}.method",
                         fix="use eagle, eagle3 or mtp; a draft model's cost: --set "
                             "workload.inference.speculative_method=draft_model with speculative_draft_model")
    if config.get("num_speculative_tokens") is None:
        raise RlsimError("a speculative_config without num_speculative_tokens: vLLM takes it from the draft's "
                         "config, which rlsim does not read", source=source, field=f"{key}.num_speculative_tokens",
                         fix=f"give {key}.num_speculative_tokens=K")
    draft_tp = config.get("draft_tensor_parallel_size")
    if draft_tp is not None and tp is not None and draft_tp != tp:
        raise RlsimError(f"a draft on {draft_tp} TP ranks beside a target on {tp} is not modelled (rlsim runs the "
                         "draft on the target's ranks)", source=source, field=f"{key}.draft_tensor_parallel_size",
                         fix=f"remove {key}.draft_tensor_parallel_size, or give {tp}")
    mapped_keys = {"speculative_method": VLLM_SPECULATIVE_METHODS[method],
                   "num_speculative_tokens": positive_int(config["num_speculative_tokens"],
                                                          f"{key}.num_speculative_tokens", source)}
    for name, target in VLLM_SPECULATIVE_FLAGS.items():
        if config.get(name) is not None:
            mapped_keys[target] = speculative_flag(config[name], f"{key}.{name}", source)
    return mapped_keys


def speculative_flag(value: Any, key: str, source: str) -> bool:
    """A speculative_config flag: a YAML / JSON boolean (vLLM's field is a bool), RlsimError naming the key else."""
    if not isinstance(value, bool):
        raise RlsimError(f"expected true or false, got {value!r}", source=source, field=key,
                         fix=f"pass {key}: true or false")
    return value


def speculative_entry_status(name: str) -> tuple[Status, str]:
    """How an import reports a vLLM speculative_config entry: mapped (naming its workload.inference key) or
    unsupported."""
    if name in VLLM_SPECULATIVE_FLAGS:
        return "mapped", f"workload.inference.{VLLM_SPECULATIVE_FLAGS[name]}"
    if name in VLLM_SPECULATIVE_KEYS:
        return "mapped", ("workload.inference.speculative_method / num_speculative_tokens (the draft's checkpoint: "
                          "priced as the method's head of the target's shape)")
    return "unsupported", "a speculative_config option rlsim does not read"


def flat_speculation(v: Values, key: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]],
                     tp: int | None) -> bool:
    """A vLLM speculative_config flattened under ``key`` (``key``.method, ...) onto workload.inference
    (vllm_speculation), its read entries marked mapped and the note asking for the acceptance rate;
    False where the config gives none."""
    entries = {k[len(key) + 1:]: value for k, value in v.flat.items() if k.startswith(key + ".")}
    if not entries:
        return False
    w.setdefault("inference", {}).update(vllm_speculation(entries, key, v.result.source, tp))
    for name in entries:
        decided[f"{key}.{name}"] = speculative_entry_status(name)
    v.result.notes.append(SPECULATION_NOTE)
    return True


def mapped(target: str, reason: str = "") -> Rule:
    return Rule("mapped", reason, target)


def ignored(reason: str) -> Rule:
    return Rule("ignored", reason)


def unsupported(reason: str, neutral: Any = _NO_NEUTRAL) -> Rule:
    return Rule("unsupported", reason, neutral=neutral)


@dataclass
class FrameworkImport:
    """A framework config turned into an rlsim scenario mapping, with every key accounted for."""
    framework: str
    source: str
    scenario: dict[str, Any]
    schedule_rule: str = ""
    mapped: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)   # mapped config key -> the scenario key it sets
    user_keys: tuple[str, ...] = ()   # scenario keys the user's --set gives (their errors are theirs)
    overridden: tuple[str, ...] = ()  # config keys the command-line overrides set (an error names them first)
    rules: Mapping[str, Rule] = field(default_factory=dict, repr=False)   # the framework's key table

    @contextmanager
    def naming_config(self) -> Iterator[None]:
        """An error of the imported scenario (no file of its own: its fields are rlsim's) names the
        config file and the config keys that set the field, the scenario field kept in the text."""
        try:
            yield
        except RlsimError as exc:
            framework_key = self._framework_key_set(exc)
            if framework_key:   # a config key given to --set, which takes the scenario's
                raise RlsimError(f"--set {framework_key}: a {self.framework} key, and --set takes rlsim's scenario keys",
                                 source=self.source, field=framework_key,
                                 fix=f"pass {framework_key}=VALUE after the config path (as the framework's own "
                                     "override), not with --set") from None
            if self._set_by_user(exc):
                raise
            # a key the import wrote that the user's --set made inapplicable is not theirs to remove
            # from the config (schedule.refit=reshard beside the import's refit gather bytes)
            written = self._written_by_import(exc)
            fix = "; ".join(part for part in (exc.fix, written and f"{written} is the import's (from the config): "
                                                          f"--set {written}=null clears it") if part) or None
            if exc.source and not str(exc.source).startswith("<"):
                if not written:
                    raise
                raise exc.reworded(exc.message, fix) from None
            keys = self.config_keys_for(exc)
            if not keys:
                raise exc.reworded(exc.message, fix, source=self.source) from None
            where = f" (rlsim's {exc.field})" if exc.field else ""
            raise RlsimError(f"{exc.message}{where}", source=self.source, field=", ".join(keys),
                             fix=f"change {keys[0]} (KEY=VALUE after the config path)"
                                 + (f"; {exc.fix}" if exc.fix else "")) from None

    def _framework_key_set(self, exc: RlsimError) -> str | None:
        """The user's --set key the error is about when it is a key of the framework's table rather
        than a scenario key (data.train_batch_size: 'unknown scenario key data' before)."""
        names = exc.fields or ([exc.field] if exc.field else [])
        for key in self.user_keys:
            if key.split(".")[0] in ("topology", "workload", "schedule"):
                continue
            if rule_for(key, self.rules) is not None and any(key == n or key.startswith(n + ".") for n in names):
                return key
        return None

    def _written_by_import(self, exc: RlsimError) -> str | None:
        """The error's field where its fix is to remove it, the imported scenario holds it (the import
        wrote it) and no --set gave it."""
        field_name = exc.field or ""
        if not field_name or not (exc.fix or "").startswith(f"remove {field_name}") or any(
                field_name == k or field_name.startswith(k + ".") for k in self.user_keys):
            return None   # only a key to remove (read past) is cleared
        node: Any = self.scenario
        for part in field_name.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return field_name

    def _set_by_user(self, exc: RlsimError) -> bool:
        names = exc.fields or ([exc.field] if exc.field else [])
        return any(name == key or name.startswith(key + ".") or key.startswith(name + ".")
                   for name in names for key in self.user_keys)

    def config_keys_for(self, exc: RlsimError) -> list[str]:
        """The config keys mapped to the error's field(s): those that set a key under it the message
        quotes as `key=value`, then those that set it exactly, with those that set a sibling the message
        quotes as `name=value` (a check across two fields names one); else
        those that set a key under it that the message names (a check across fields names the
        section); else those that set the nearest section above it. A key the command-line overrides
        set under the field comes first of all."""
        out: list[str] = []
        for name in exc.fields or ([exc.field] if exc.field else []):
            parent = name.rpartition(".")[0]
            # the keys that set a value the message quotes as `key=value` under the field come first
            # (a layout's memory error: micro_batch=4 is ppo_micro_batch_size_per_gpu's, not strategy's)
            quoted = [key for key, target in self.targets.items()
                      if target.startswith(name + ".") and f"{target.rsplit('.', 1)[-1]}=" in exc.message]
            exact = [key for key, target in self.targets.items() if target == name]
            exact += [key for key, target in self.targets.items() if exact and target != name
                      and target.rpartition(".")[0] == parent and f"{target.rpartition('.')[2]}=" in exc.message]
            exact = quoted + [key for key in exact if key not in quoted] if exact else exact
            named = [key for key, target in self.targets.items()
                     if target.startswith(name + ".") and target.rsplit(".", 1)[-1] in exc.message]
            above = [target for target in self.targets.values() if name.startswith(target + ".")]
            nearest = max(above, key=len, default=None)
            # a key the command line just changed under the field is the likeliest cause (tp 16 on 16
            # devices named the strategy flag that maps the whole layout)
            changed = [key for key in self.overridden if key in self.targets
                       and (self.targets[key] == name or (self.targets[key].startswith(name + ".")
                                                          and _names(exc.message, self.targets[key].rsplit(".", 1)[-1])))]
            out += changed + (exact or named or [key for key, target in self.targets.items() if target == nearest])
        # a key the command line just changed on the other side of a conflict comes first of all
        # (free_cache_engine=false keeping the engine beside a training step that no longer fits)
        beside = [key for key in self.overridden if key in self.targets and any(
            self.targets[key] == name or self.targets[key].startswith(name + ".") for name in exc.related)]
        return list(dict.fromkeys(beside + out))

    def report(self) -> dict[str, Any]:
        """The `framework_import` object of `run --json`."""
        return {"source": self.source, "framework": self.framework, "schedule_rule": self.schedule_rule,
                "mapped": dict(self.mapped), "ignored": dict(self.ignored),
                "unsupported": dict(self.unsupported), "unknown": dict(self.unknown), "notes": list(self.notes)}

    def listing(self) -> list[str]:
        """Human lines (stderr of `run`, comments of `--print-scenario`): all but the mapped keys."""
        lines = [f"{self.framework} config {self.source}: {len(self.mapped)} keys mapped; schedule: {self.schedule_rule}"]
        for title, keys in (("unsupported (changes time, not modelled)", self.unsupported),
                            ("unknown (not in rlsim's table)", self.unknown), ("ignored", self.ignored)):
            if keys:
                lines.append(f"{title}:")
                lines.extend(f"  {key}: {why}" for key, why in keys.items())
        if self.notes:
            lines.append("notes:")
            lines.extend(f"  {note}" for note in self.notes)
        return lines

    def scenario_yaml(self, overrides: Iterable[str] = ()) -> str:
        """The scenario (with ``--set`` overrides applied) as YAML a user can edit and `rlsim run` from any
        folder: a relative path that names a file here (--topology t.yaml) written absolute."""
        from ..paths import with_paths_from
        data = copy.deepcopy(self.scenario)
        for item in overrides:
            key, value = parse_assignment(item)
            set_dotted(data, key, value)
        data = with_paths_from(data, [Path.cwd()])
        header = "\n".join(f"# {line}" for line in self.listing())
        article = "an" if self.framework[:1] in "aeiou" else "a"
        return f"# rlsim scenario imported from {article} {self.framework} config\n{header}\n" + \
            yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


# ---- reading --------------------------------------------------------------------------------------
def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists and empty mappings are leaves."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted))
        else:
            out[dotted] = value
    return out


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """flatten's inverse: {'a.b': 1} -> {'a': {'b': 1}}."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def apply_hydra_overrides(flat: dict[str, Any], items: Iterable[str], source: str,
                          known: Callable[[str], bool] | None = None, refuses: str | None = None) -> dict[str, Any]:
    """Hydra command-line overrides: ``key=value``, ``+key=value`` (add), ``++key=value`` (add or
    set), ``~key`` (delete). Values are YAML scalars/lists as Hydra reads simple values. ``known``:
    the framework's keys beyond the file's (its defaults); with it, a plain ``key=value`` of a key
    neither the file nor ``known`` has is an error, as Hydra's struct config refuses it ("Could not
    override ... To append to your config use +key=value"). ``refuses``: the framework's own parser,
    where it is not Hydra's and has no ``+`` form (an argument parser, a fixed dataclass tree): the
    fix then names the close key only."""
    out = dict(flat)
    for item in items:
        text = item.strip()
        if text.startswith("~"):
            key = text[1:].partition("=")[0]
            if known is not None and not _in_config(key, out) and not known(key):   # Hydra: "does not exist"
                close = _close_sibling(key, out)
                raise RlsimError(f"the override {item!r} deletes a key the config does not have", source=source,
                                 field=key, fix=f"did you mean ~{close}?" if close else "give a key the config has")
            out = {k: v for k, v in out.items() if k != key and not k.startswith(key + ".")}
            continue
        try:
            key, value = parse_assignment(text.lstrip("+")) if "=" in text else ("", None)
        except RlsimError:   # its text speaks of --set: these are the config's overrides
            raise RlsimError(f"cannot read the override {item!r}", source=source,
                             fix="write key=value with a dotted key, e.g. data.train_batch_size=512") from None
        if not key or any(not part for part in key.split(".")):
            raise RlsimError(f"cannot read the override {item!r}", source=source,
                             fix="write key=value with a dotted key, e.g. data.train_batch_size=512")
        if known is not None and not text.startswith("+") and not _in_config(key, out) and not known(key):
            raise RlsimError(f"the override {item!r} names a key the config does not have", source=source,
                             field=key, fix=_override_fix(key, out, text, refuses))
        out = {k: v for k, v in out.items() if not k.startswith(key + ".")}
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, key))
        else:
            out[key] = value
    return out


def _in_config(key: str, flat: Mapping[str, Any]) -> bool:
    """A leaf of the flattened config, or a section above some of its leaves."""
    return key in flat or any(k.startswith(key + ".") for k in flat)


def _close_sibling(key: str, flat: Mapping[str, Any]) -> str | None:
    """The config's key in the same section one typo from ``key``, if any."""
    import difflib
    section = key.rpartition(".")[0]
    siblings = [k for k in flat if k.rpartition(".")[0] == section]
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.85)
    return close[0] if close else None


def _override_fix(key: str, flat: Mapping[str, Any], text: str, refuses: str | None) -> str:
    close = _close_sibling(key, flat)
    if refuses:
        return (f"did you mean {close}? " if close else "give one of its keys; ") + \
            f"{refuses} refuses a key it does not have"
    return (f"did you mean {close}? " if close else "") + f"to add the key as Hydra does, write +{text}"


_REF = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")
_SELECT = re.compile(r"\$\{oc\.select:\s*([A-Za-z0-9_.]+)\s*(?:,\s*((?:[^{}]|\{\})*?))?\s*\}")
_MUL = re.compile(r"\$\{mul:\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\}")


def resolve_interpolations(flat: dict[str, Any]) -> dict[str, Any]:
    """``${a.b}`` references to other keys (``${.b}``: a sibling, ``${..b}`` a parent's sibling, as
    OmegaConf reads them), OmegaConf's ``${oc.select:a.b,default}`` (the key's value, or the default
    where the config has no such key: verl's generated configs use it throughout) and NeMo RL's
    ``${mul:x, y}`` resolver (it registers 'mul' with OmegaConf), resolved; anything else
    (``${oc.env:...}``) is left as written."""
    out = dict(flat)
    for _ in range(8):   # nested references resolve from the inside out
        changed = False
        for key, value in list(out.items()):
            if isinstance(value, str) and "${" in value:
                new = _resolve_one(value, out, key)
                changed |= new != value
                if isinstance(new, Mapping) and new:   # a whole section selected: its keys under this one
                    del out[key]
                    out.update(flatten(new, key))
                else:
                    out[key] = new
        if not changed:
            break
    return out


def _absolute(name: str, key: str) -> str:
    """A reference as written at ``key`` (OmegaConf's relative ``.b`` / ``..b``) -> the flat key."""
    dots = len(name) - len(name.lstrip("."))
    if not dots:
        return name
    return ".".join(key.split(".")[:-dots] + [name[dots:]])


def _select(match: re.Match, flat: Mapping[str, Any], key: str) -> Any:
    """oc.select: the key's resolved value; its default (a YAML scalar) where the config lacks the key;
    the text as written while the key is still unresolved (a later pass takes it)."""
    name = _absolute(match.group(1), key)
    section = {k[len(name) + 1:]: v for k, v in flat.items() if k.startswith(name + ".")}
    if name not in flat and section:   # a section (flattened): its keys, once they are resolved
        return match.group(0) if any(_unresolved(v) for v in section.values()) else unflatten(section)
    if name not in flat:
        return yaml.safe_load(match.group(2)) if match.group(2) is not None else None
    return match.group(0) if _unresolved(flat[name]) else flat[name]


def _resolve_one(text: str, flat: Mapping[str, Any], key: str = "") -> Any:
    def value_of(m: re.Match) -> Any:
        name = _absolute(m.group(1), key)
        return flat[name] if name in flat and not _unresolved(flat[name]) else m.group(0)

    for pattern, value in ((_SELECT, lambda m: _select(m, flat, key)), (_REF, value_of)):
        whole = pattern.fullmatch(text)
        if whole:
            return value(whole)
        text = pattern.sub(lambda m, value=value: str(value(m)), text)
    whole = _MUL.fullmatch(text)
    if whole:
        product = float(whole.group(1)) * float(whole.group(2))
        return int(product) if product.is_integer() else product
    return text


def _unresolved(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def read_config(path: str | Path, overrides: Iterable[str], *, what: str,
                known: Callable[[str], bool] | None = None, refuses: str | None = None) -> dict[str, Any]:
    """One framework YAML (a NeMo RL ``defaults:`` chain merged under it), flattened, overrides and
    interpolations applied (``known``: as apply_hydra_overrides)."""
    data = _with_defaults(Path(path), what, chain=())
    return resolve_interpolations(apply_hydra_overrides(flatten(data), overrides, str(path), known, refuses))


MAX_DEFAULTS_DEPTH = 8   # base files under base files: NeMo RL's recipes chain two or three


def _with_defaults(path: Path, what: str, chain: tuple[Path, ...]) -> dict[str, Any]:
    """The file with the files its ``defaults:`` names merged under it (depth first, in order);
    ``chain``: the files that led here (a file that names one of them again is a cycle)."""
    data = read_yaml(path, what=what, fix=f"give the path of a {what}")
    bases = data.pop("defaults", None)
    if bases is None:
        return data
    if not isinstance(bases, (str, list)):
        raise RlsimError(f"defaults must be a file path or a list of them, got {bases!r}", source=str(path),
                         field="defaults", fix="list base files as paths relative to this file")
    merged: dict[str, Any] = {}
    here = (*chain, path.resolve())
    own_keys_merged = False
    for base in [bases] if isinstance(bases, str) else bases:
        if base == "_self_":   # Hydra: this file's own keys go here; the entries after it override them
            merged, own_keys_merged = deep_merge(merged, data), True
            continue
        if isinstance(base, dict):
            entry = ", ".join(f"{group}: {name}" for group, name in base.items())
            raise RlsimError(f"defaults entry '{entry}' selects a Hydra config group (group@package: option), "
                             "which rlsim does not resolve", source=str(path), field="defaults",
                             fix="list the chosen option's file by its path relative to this file, or copy its "
                                 "keys (under the package's section) into this file")
        if not isinstance(base, str):
            raise RlsimError(f"defaults entry {base!r} is not a file path (Hydra config groups are not read)",
                             source=str(path), field="defaults", fix="list base files as paths relative to this file")
        base_path = (path.parent / base).resolve()
        if not base_path.is_file():
            raise RlsimError(f"base config {base!r} not found (looked for {base_path})", source=str(path),
                             field="defaults", fix="put the base file there, or copy its keys into this file")
        if base_path in here:
            raise RlsimError(f"defaults entry {base!r} is a cycle: {' -> '.join(p.name for p in (*here, base_path))}",
                             source=str(path), field="defaults", fix="remove the entry that leads back")
        if len(here) > MAX_DEFAULTS_DEPTH:
            raise RlsimError(f"defaults nest deeper than {MAX_DEFAULTS_DEPTH} files", source=str(path),
                             field="defaults", fix="merge some base files into one")
        merged = deep_merge(merged, _with_defaults(base_path, what, here))
    return merged if own_keys_merged else deep_merge(merged, data)


# ---- classifying ----------------------------------------------------------------------------------
def rule_for(key: str, rules: Mapping[str, Rule]) -> Rule | None:
    """The exact entry, else the longest ``section.*`` entry covering the key."""
    if key in rules:
        return rules[key]
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        wildcard = ".".join(parts[:n]) + ".*"
        if wildcard in rules:
            return rules[wildcard]
    return None


def in_table(key: str, rules: Mapping[str, Rule]) -> bool:
    """Whether the table covers ``key``: its exact entry, or a section's catch-all unless the key is
    one typo away from a listed key (then it is a typo, not the section's)."""
    return key in rules or (rule_for(key, rules) is not None and not _close_key(key, rules))


def classify(result: FrameworkImport, flat: Mapping[str, Any], rules: Mapping[str, Rule],
             decided: Mapping[str, tuple[Status, str]] | None = None) -> None:
    """Put every key of ``flat`` in one list of ``result``; ``decided`` (from the builder, e.g. a
    key that does not apply to the chosen schedule) overrides the table."""
    decided = decided or {}
    for key in sorted(flat):
        value = flat[key]
        if key in decided:
            status, reason = decided[key]
        elif not in_table(key, rules) and key.rpartition(".")[2] != "_target_":
            close = _close_key(key, rules)   # a typo of a known key is not the section's catch-all's
            result.unknown[key] = ("not in rlsim's table of this framework's keys; check its effect on time"
                                   + (f"; did you mean {close!r}?" if close else ""))
            continue
        else:
            status, reason = table_status(key, value, rules)
            rule = rule_for(key, rules)
            if status == "mapped" and rule is not None and rule.target:
                result.targets[key] = rule.target
        getattr(result, status)[key] = reason


def table_status(key: str, value: Any, rules: Mapping[str, Rule]) -> tuple[Status, str]:
    """(status, reason) the table gives ``key`` at ``value`` (a key it covers): its rule's, an
    unsupported key at its neutral value or unset (null, empty) ignored, a Hydra `_target_` ignored."""
    if key.rpartition(".")[2] == "_target_":
        return "ignored", HYDRA_TARGET
    rule = rule_for(key, rules)
    assert rule is not None, key
    reason = f"{rule.target}: {rule.reason}" if rule.target else rule.reason
    if rule.status == "mapped":
        return "mapped", reason if rule.reason or not rule.target else str(rule.target)
    if rule.status == "unsupported" and rule.neutral is not _NO_NEUTRAL and value == rule.neutral:
        return "ignored", f"{value!r} is what rlsim models ({rule.reason})"
    if rule.status == "unsupported" and rule.neutral is _NO_NEUTRAL and _unset(value):
        return "ignored", f"unset ({value!r}): the option is not applied ({rule.reason})"
    return rule.status, reason


# Hydra's `_target_` entries name the class a section instantiates (verl's generated configs carry one
# per section): bookkeeping, not a setting
HYDRA_TARGET = "Hydra's instantiate target (a class path): no effect on step time"


def _unset(value: Any) -> bool:
    """A value that applies no option: null, or an empty mapping / list (verl's engine_kwargs: {})."""
    return value is None or (isinstance(value, (Mapping, list)) and not value)


def _close_key(key: str, rules: Mapping[str, Rule]) -> str:
    """A key of the table one typo away from ``key`` in its section (tensor_model_paralel_size ->
    tensor_model_parallel_size); '' when none."""
    import difflib
    section, _, name = key.rpartition(".")
    # a typo keeps the length within 2 characters (a longer or shorter sibling such as
    # log_prob_micro_batch_size / log_prob_micro_batch_size_per_gpu is another key)
    names = [known.rpartition(".")[2] for known in rules if known.rpartition(".")[0] == section
             and not known.endswith("*") and abs(len(known.rpartition(".")[2]) - len(name)) <= 2]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.85)
    return f"{section}.{close[0]}" if close else ""


# ---- models ---------------------------------------------------------------------------------------
# Suffixes of fine-tuned / re-packaged checkpoints that keep the base architecture (Hugging Face
# naming: -Instruct / -Chat / -Base / -it / -Thinking; dtype repacks such as unsloth's -BF16; dated
# releases such as DeepSeek-V3-0324, same config.json as V3 apart from the weights).
MODEL_SUFFIXES = ("-instruct", "-chat", "-base", "-it", "-thinking", "-hf", "-bf16", "-fp8", "-0324", "-0528", "-2507")
# Spelling differences between Hugging Face ids and rlsim's preset names.
MODEL_PREFIXES = (("meta-llama-", "llama"), ("llama-", "llama"))


def model_for(value: Any, field_name: str, source: str, policy: bool = True) -> tuple[str, str]:
    """A model path as a config writes it -> (a model preset or config.json path, how it was found).
    ``policy``: the key is the policy's (workload.model, which --set can give instead); a teacher's,
    reward model's or critic's is fixed in the config key alone (--set workload.model changed the
    policy, the hint these errors gave)."""
    from ..llm.architecture import model_names
    if value is None or not str(value).strip():
        raise RlsimError("the config names no model", source=source, field=field_name,
                         fix=f"pass {field_name}=HF_ID after the config path"
                             + (", or --set workload.model=PRESET" if policy else ""))
    text = str(value).strip()
    path = Path(text).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return str(path / "config.json"), "the config.json in that folder"
    if path.suffix == ".json" and path.is_file():
        return str(path), "that config.json"
    names = set(model_names())
    name = path.name.lower() if path.name else text.lower()
    for candidate in _name_candidates(name):
        if candidate in names:
            return candidate, f"model preset {candidate}"
    presets = ", ".join(sorted(names))
    meant = next((typo for typo in (one_typo_from(c, names) for c in _name_candidates(name)) if typo), "")
    raise RlsimError(f"model {text!r} matches no model preset and is not a folder with a config.json"
                     + meant.replace("did you mean '", "did you mean the preset '"),
                     source=source, field=field_name,
                     fix=(f"--set workload.model=PRESET (one of: {presets}) or a path to its config.json" if policy
                          else f"pass {field_name}= a model preset's id (one of: {presets}) or a folder with its "
                               "config.json"))


def begin_workload(v: Values, model_key: str, what: str, model_given: bool,
                   decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """The imported workload's name and description (from the config's file name) and its model:
    ``model_key``'s model id as a preset, or the user's ``--set workload.model`` (then the key is
    listed as mapped there). ``what``: the config's kind, for the description."""
    src = v.result.source
    w: dict[str, Any] = {"name": Path(src).stem, "description": f"imported from the {what} {Path(src).name}"}
    if model_given:
        decided[model_key] = ("mapped", "workload.model: given by --set")
    else:
        w["model"], how = model_for(v(model_key), model_key, src)
        v.result.notes.append(f"{model_key} {v(model_key)!r} -> {how}")
    return w


def inactive_section(flat: Mapping[str, Any], prefix: str, reason: str,
                     decided: dict[str, tuple[Status, str]]) -> None:
    """The keys under ``prefix`` (a training backend the config does not run) listed as ignored with
    ``reason``, not as mapped: they have no effect on what is simulated."""
    for key in flat:
        if key.startswith(prefix + ".") and key not in decided:
            decided[key] = ("ignored", reason)


def without_inapplicable_layout_keys(layout: dict[str, Any], model: Any, config_keys: Mapping[str, str],
                                     decided: dict[str, tuple[Status, str]]) -> dict[str, Any]:
    """An imported train_layout less the keys its layout or model makes inapplicable, which a
    scenario refuses (params.py inapplicable_given_key, TrainLayout.check_model): a config's
    sequence_parallel true at tp 1 (no TP group to split over) and its expert_tensor_parallel_size on
    a dense model (NeMo RL's recipes give 1 for dense models too). ``config_keys``: the config key
    each came from (layout key -> config key), marked ignored. ``model``: the workload.model mapped, or the
    one --set gives (model_set_by_user; None: not known here, a sweep's --grid key: the model is then
    taken as dense at ep 1)."""
    out = dict(layout)
    if out.get("sequence_parallel") and out.get("tp", 1) == 1 and "sequence_parallel" in config_keys:
        del out["sequence_parallel"]
        decided[config_keys["sequence_parallel"]] = ("ignored", "tensor parallel size 1: no TP group for sequence "
                                                     "parallelism to split over")
    if "etp" in out and "etp" in config_keys and not has_experts(model, out.get("ep", 1)):
        del out["etp"]
        decided[config_keys["etp"]] = ("ignored", "a dense model: no expert layers to split")
    return out


def model_set_by_user(user_sets: Mapping[str, Any] | Iterable[str]) -> Any:
    """The value of the command's --set workload.model (a preset, a config.json path or a mapping), which
    replaces the config's model: ``user_sets`` maps each scenario key the command sets to its value
    (commands/common.framework_import). None where no --set gives it, or where its value is not one (a
    sweep's --grid key, whose values differ from point to point)."""
    return user_sets.get("workload.model") if isinstance(user_sets, Mapping) else None


def has_experts(model: Any, ep: int) -> bool:
    """Whether the model (a preset, a config.json path or a mapping: the mapped one, or the user's --set
    workload.model) has experts; a model not known here (None) or unreadable (its own error comes later),
    by its expert parallelism."""
    from ..llm.architecture import load_model
    if model is None:
        return ep > 1
    try:
        return bool(load_model(model).is_moe)
    except RlsimError:
        return ep > 1


def _name_candidates(name: str) -> list[str]:
    out = [name]
    stripped = name
    changed = True
    while changed:
        changed = False
        for suffix in MODEL_SUFFIXES:
            if stripped.endswith(suffix):
                stripped = stripped[: -len(suffix)]
                out.append(stripped)
                changed = True
    for plain in list(out):
        for old, new in MODEL_PREFIXES:
            if plain.startswith(old):
                out.append(new + plain[len(old):])
    return out


# ---- topology -------------------------------------------------------------------------------------
def size_topology(spec: str | None, gpus: int, where: str, source: str,
                  user_sizes: bool, gpus_per_node: int | None = None) -> tuple[dict[str, Any], str]:
    """``{preset: T, nodes: N}`` holding ``gpus`` devices (named by ``where``, for messages), and a
    note. ``user_sizes``: a ``--set topology.*`` override follows, so an unsizable preset is kept as is.
    ``gpus_per_node``: the GPUs the config uses on each of its nodes; fewer than the preset's server
    holds (verl's 1-GPU quickstart, NeMo RL's 1-GPU default, 4 GPUs on each of 2 nodes) runs on part
    of each server (``devices_per_node``), its GPUs still on the server's scale-up links and NICs."""
    name = spec or DEFAULT_TOPOLOGY
    preset, _ = resolve("topologies", name)
    per_node = preset.get("devices_per_node")
    assumed = "" if spec else f" ({DEFAULT_TOPOLOGY} assumed: the hardware is not in the config; pick yours with --topology)"
    if (gpus_per_node and not user_sizes and "nodes" in preset and isinstance(per_node, int)
            and gpus_per_node < per_node and gpus % gpus_per_node == 0):
        nodes = gpus // gpus_per_node
        return ({"preset": name, "nodes": nodes, "devices_per_node": gpus_per_node},
                f"topology {name} x {nodes} nodes, {gpus_per_node} of each node's {per_node} devices = {gpus} GPUs "
                f"({where}; topology.devices_per_node {gpus_per_node}){assumed}")
    domain_key = next((k for k in DOMAIN_SIZE_KEYS if k in preset), None)
    if "nodes" not in preset and domain_key and not user_sizes:   # sized in racks / supernodes of whole domains
        return _domains_for(name, preset, domain_key, gpus, where, source, assumed)
    if "nodes" not in preset or not isinstance(per_node, int) or per_node < 1:
        if user_sizes:
            return {"preset": name}, (f"topology {name} sized by the topology.* items of --set / --grid"
                                      f"{_CHECKS_AT_CONFIG.format(gpus=gpus, where=where)}")
        raise RlsimError(f"topology {name!r} is not sized in nodes; cannot hold the config's {gpus} GPUs ({where})",
                         source=source, field="topology", fix="size it with --set topology.PARAM=N (see rlsim presets)")
    nodes = math.ceil(gpus / per_node)
    if nodes * per_node != gpus and not user_sizes:
        raise RlsimError(f"the config's {gpus} GPUs ({where}) are not whole {name} nodes of {per_node} devices",
                         source=source, field="topology.nodes",
                         fix=f"size the config's world in whole nodes ({where}: {nodes * per_node} GPUs), which the "
                             f"framework's own checks then read; or --set topology.nodes=N (e.g. {nodes}) "
                             "[topology.devices_per_node=G], or a topology whose nodes hold the config's GPUs")
    if user_sizes:   # the run's size is the --set one: the config's would mislead as the run's
        return ({"preset": name, "nodes": nodes},
                f"topology {name} sized by the topology.* items of --set / --grid (the config's {gpus} GPUs ({where}) "
                f"would be {nodes} nodes)"
                f"{_CHECKS_AT_CONFIG.format(gpus=gpus, where=where)}{assumed}")
    return {"preset": name, "nodes": nodes}, f"topology {name} x {nodes} nodes = {gpus} GPUs ({where}){assumed}"


# What a run sized by topology.* items (--set, a sweep's --grid) does not re-check: the framework's own
# checks of its world (parallel sizes dividing it, the mini-batch over its data-parallel ranks) read the config's size.
_CHECKS_AT_CONFIG = ("; the framework's checks of its world read the config's {gpus} GPUs, not the run's: size "
                     "the config itself ({where}) to have them read the run's")


# A preset sized in whole NVLink / UB domains rather than nodes (gb200-nvl72: racks; cloudmatrix384:
# supernodes): devices_per_node x nodes_per_domain devices each.
DOMAIN_SIZE_KEYS = ("racks", "supernodes", "domains")


def _domains_for(name: str, preset: Mapping[str, Any], key: str, gpus: int, where: str, source: str,
                 assumed: str) -> tuple[dict[str, Any], str]:
    per_domain = preset.get("devices_per_node", 0) * preset.get("nodes_per_domain", 0)
    if not isinstance(per_domain, int) or per_domain < 1:
        raise RlsimError(f"topology {name!r} is not sized in nodes; cannot hold the config's {gpus} GPUs ({where})",
                         source=source, field="topology", fix=f"size it with --set topology.{key}=N")
    count = math.ceil(gpus / per_domain)
    if count * per_domain != gpus:
        raise RlsimError(f"the config's {gpus} GPUs ({where}) are not whole {key} of {name} ({per_domain} devices "
                         "each)", source=source, field=f"topology.{key}",
                         fix=f"size the config's world to {count * per_domain} GPUs ({where}), which the framework's "
                             f"own checks then read; or --set topology.{key}={count} (its {count * per_domain} "
                             "devices; the config's checks stay at its own size), or a topology whose size holds "
                             "the config's GPUs")
    return {"preset": name, key: count}, f"topology {name} x {count} {key} = {gpus} GPUs ({where}){assumed}"


def default_length(field_name: str) -> dict[str, Any]:
    """rlsim's workload default length law (WorkloadConfig), to be capped at a config's maximum."""
    from ..scenario import WorkloadConfig
    factory = WorkloadConfig.model_fields[field_name].default_factory
    return dict(factory()) if factory else {}


def capped_length(field_name: str, cap: Any, cap_key: str, source: str,
                  notes: list[str] | None = None) -> dict[str, Any]:
    """rlsim's default law with ``max`` from the config (the law itself is not in a framework config)."""
    law = default_length(field_name)
    law["max"] = positive_int(cap, cap_key, source)
    if notes is not None and law.get("median", 0) >= law["max"]:
        notes.append(f"workload.{field_name}: rlsim's default median {law['median']} is at or above the config's "
                     f"cap {law['max']} ({cap_key}): most lengths end at the cap; set --set "
                     f"workload.{field_name}.median=... for your data")
    return law


MAX_CONFIG_COUNT = 2 ** 53   # past it a float is no exact whole number (1e30 read as 1000000000000000019884624838656)


def positive_int(value: Any, key: str, source: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or int(value) != value or value < 1):
        raise RlsimError(f"expected a whole number >= 1, got {value!r}", source=source, field=key,
                         fix=f"pass {key}=N")
    if value > MAX_CONFIG_COUNT:
        raise RlsimError(f"{value!r} is past 2^53, not a count a run has", source=source, field=key,
                         fix=f"pass {key}=N with a realistic N")
    return int(value)


def hsdp_shard_size(value: Any, key: str, world: int, who: str, source: str) -> int | None:
    """An FSDP ``fsdp_size`` as verl's and SkyRL's create_device_mesh read it over ``world`` GPUs: below
    0 or at least the world, a shard over every rank (None); between, a (world / fsdp_size, fsdp_size)
    mesh, HSDP: the state sharded over fsdp_size consecutive ranks, replicated across
    (workload.train_layout.zero_shard_size). ``who``: whose GPUs, for the error (the trainer's, the policy's)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value < 0):
        return None
    size = positive_int(value, key, source)
    if size >= world:
        return None
    if world % size:
        raise RlsimError(f"fsdp_size {size} does not divide the {who}'s {world} GPUs (the (ddp, fsdp) device mesh "
                         "needs world / fsdp_size whole)", source=source, field=key,
                         fix=f"use a divisor of the {who}'s {world} GPUs, or -1 (shard over all of them)")
    return size


def fraction(value: Any, key: str, source: str) -> float:
    """A number in (0, 1] (a memory share)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise RlsimError(f"expected a number in (0, 1], got {value!r}", source=source, field=key,
                         fix=f"pass {key}=0.9 (for example)")
    return float(value)


def flag(value: Any, key: str, source: str) -> bool:
    """A true / false switch; null (or absent) reads as false, as the frameworks' own `if cfg[key]`."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RlsimError(f"expected true or false, got {value!r}", source=source, field=key,
                         fix=f"pass {key}=true or {key}=false")
    return value


# The training stacks of the trainers that run Hugging Face transformers' model code (TRL, verl's
# FSDP workers, OpenRLHF's DeepSpeed actor, AReaL's FSDP engine, NeMo RL's DTensor policy, SkyRL's
# FSDP workers): its unfused element-wise ops, or Liger's kernels in their place
# (params.HF_TRANSFORMERS(_LIGER); the trainers without its TP, or with FSDP2's ZeRO 3 only, have their own,
# of the same constants).
HF_TRAIN_SOFTWARE = "hf-transformers"


def merge_train_params(w: dict[str, Any], fields: Mapping[str, Mapping[str, Any]]) -> None:
    """Merges ``fields`` (a train_params part -> its keys: {"memory": {...}, "comm": {...}}) into the
    workload ``w``'s train_params: each step of an import adds its keys beside those another step
    wrote, none replaces a whole part (or train_params) another filled."""
    for part, values in fields.items():
        w.setdefault("train_params", {}).setdefault(part, {}).update(values)


def hf_train_software(liger: bool, trainer: str = HF_TRAIN_SOFTWARE) -> str:
    """The stack of transformers' model code (Liger's kernels in it with ``liger``) as ``trainer``
    runs it: a trainer with a stack of its own, for the parallelism or the ZeRO stages it lacks
    (params.VERL_FSDP "verl-fsdp", SKYRL_FSDP "skyrl-fsdp", TRL_ACCELERATE "trl", NEMO_RL_DTENSOR
    "nemo-rl-dtensor", AREAL_FSDP "areal-fsdp", AREAL_ARCHON "areal-archon"), else the shared hf-transformers."""
    from ..params import TRAIN_SOFTWARE
    name = f"{trainer}-liger" if liger else trainer
    if name not in TRAIN_SOFTWARE:
        raise ValueError(f"no training stack {name!r}")   # a trainer without a Liger variant: the caller's bug
    return name


# transformers' attention implementations (attn_implementation) that run flash_attention_forward
# (4.57.1 modeling_utils.py ALL_ATTENTION_FUNCTIONS; a Hub kernel with flash_attn_varlen_func takes the
# same path, integrations/hub_kernels.py load_and_register_kernel): given a padding mask,
# modeling_flash_attention_utils.py _flash_attention_forward unpads the rows (_upad_input) and runs the
# varlen kernel over their real tokens. SDPA runs torch's fused kernels over the padded width (the mask
# rules the flash backend out: the memory-efficient one, no scores kept); eager materializes the scores.
HF_FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3", "kernels-community/flash-attn",
                      "kernels-community/flash-attn3", "kernels-community/vllm-flash-attn3")
HF_SDPA, HF_EAGER = "sdpa", "eager"


def hf_attention_compute(impl: Any, padded: bool) -> dict[str, Any] | None:
    """workload.train_params.compute keys for transformers' attention implementation ``impl`` (None: the
    transformers default, SDPA) on padded rows (``padded``) or packed ones: a flash implementation's
    padded rows take attention_skips_padding (packed rows need nothing: rlsim prices them varlen); SDPA
    none (a fused kernel over the padded width); eager compute.flash_attention false (the scores
    materialized, rlsim's score-traffic constants stand for transformers' eager_attention_forward). None
    where rlsim does not model ``impl`` (flex attention, another Hub kernel) or where packed rows run
    without a flash kernel (one packed row's attention would span its samples)."""
    if impl in HF_FLASH_ATTENTION:
        return {"attention_skips_padding": True} if padded else {}
    if not padded:
        return None
    if impl in (None, HF_SDPA):
        return {}
    return {"flash_attention": False} if impl == HF_EAGER else None


# framework dtype names -> rlsim's (llm/architecture.py DTYPE_BYTES)
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
          "fp8": "fp8", "float8": "fp8", "int8": "int8"}


class Values:
    """Reads keys of a flat config; an absent key takes the framework's own default (``defaults``,
    each listed in the notes so the user sees what was assumed)."""

    def __init__(self, flat: Mapping[str, Any], defaults: Mapping[str, Any], result: FrameworkImport,
                 defaults_source: str) -> None:
        self.flat, self.defaults, self.result, self.defaults_source = flat, defaults, result, defaults_source

    def __call__(self, key: str) -> Any:
        if key in self.flat:
            value = self.flat[key]
            if _unresolved(value):
                raise RlsimError(f"cannot resolve {value!r}", source=self.result.source, field=key,
                                 fix=f"pass {key}=VALUE after the config path")
            return value
        if key in self.defaults:
            value = self.defaults[key]
            note = f"{key} not given: {self.result.framework}'s default {value!r} ({self.defaults_source})"
            if note not in self.result.notes:
                self.result.notes.append(note)
            return value
        return None

    def given(self, key: str) -> bool:
        return key in self.flat

    def count(self, key: str) -> int:
        """The key's value as a whole number >= 1 (null or absent without a framework default: an error)."""
        return positive_int(self(key), key, self.result.source)

    def whole(self, key: str, absent: int | None = None) -> int | None:
        """The key's value as a whole number >= 1; ``absent`` where the config gives none (null)."""
        value = self(key)
        return absent if value is None else positive_int(value, key, self.result.source)

    def fraction(self, key: str) -> float:
        return fraction(self(key), key, self.result.source)

    def natural(self, key: str) -> int:
        """The key's value as a whole number >= 0 (a count that may be none: an off-policyness bound)."""
        value = self(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RlsimError(f"expected a whole number >= 0, got {value!r}", source=self.result.source, field=key,
                             fix=f"pass {key}=N")
        return value

    def flag(self, key: str) -> bool:
        return flag(self(key), key, self.result.source)

    def section(self, prefix: str) -> bool:
        return any(k.startswith(prefix + ".") for k in self.flat)

    def dtype(self, key: str, what: str = "dtype") -> str:
        """The key's dtype name as rlsim's (DTYPES); ``what`` names it in the error."""
        value = str(self(key))
        if value not in DTYPES:
            raise RlsimError(f"unknown {what} {value!r}", source=self.result.source, field=key,
                             fix=f"use one of: {', '.join(DTYPES)}")
        return DTYPES[value]


def _names(message: str, leaf: str) -> bool:
    """Whether an error message names a layout field (``tp 16``, ``tp=16``): a parallel size the
    command line changed is the error's likeliest cause only when the message is about it."""
    return re.search(rf"\b{re.escape(leaf)}[ =]\d", message) is not None


def begin_import(framework: str, path: str | Path, overrides: Iterable[str], *, what: str,
                 rules: Mapping[str, Rule], defaults: Mapping[str, Any], defaults_source: str,
                 schedule: str | None, schedule_fix: str, base: Sequence[str] | None = None,
                 refuses: str | None = None) -> tuple[dict[str, Any], FrameworkImport, Values]:
    """What an importer whose config says its own schedule opens with: --framework-schedule refused;
    the YAML read with its overrides, where a plain ``key=value`` of a key neither the file nor the
    framework's table and defaults know is an error (Hydra's override parser refuses it: "To append
    to your config use +key=value"); the result to fill and the reader of its values. ``base``: the
    config as key=value items (a launch script's arguments), read in place of the file's YAML;
    ``refuses``: as apply_hydra_overrides."""
    if schedule:
        raise RlsimError("--framework-schedule is for verl configs (its recipe) and TRL's (its trainer)",
                         field="--framework-schedule", fix=schedule_fix)
    overrides = list(overrides)

    def known(key: str) -> bool:
        return key in defaults or in_table(key, rules)
    flat = (read_config(path, overrides, what=what, known=known, refuses=refuses) if base is None else
            resolve_interpolations(apply_hydra_overrides({}, [*base, *overrides], str(path), known, refuses)))
    result = FrameworkImport(framework, str(path), {}, rules=rules, overridden=overridden_keys(overrides))
    return flat, result, Values(flat, defaults, result, defaults_source)


def overridden_keys(items: Iterable[str]) -> tuple[str, ...]:
    """The config keys of Hydra-style overrides (key=value, +key=value, ++key=value), in order."""
    keys = [text.strip().lstrip("+").partition("=")[0].strip() for text in items
            if "=" in text and not text.strip().startswith("~")]
    return tuple(dict.fromkeys(key for key in keys if key))


def world_divides(v: Any, world: int, layout: Mapping[str, Any], keys: Sequence[str], backend: str,
                  fallback: str) -> None:
    """A training world that tp x pp x cp does not divide: the frameworks' backends refuse it at
    start-up (Megatron-Core's initialize_model_parallel: "world size is not divisible by tensor
    parallel size times pipeline parallel size times context parallel size"; a DTensor / FSDP
    device mesh likewise), where rlsim alone would leave the rest idle (a user trial: PP 3 on 16
    GPUs ran). Named by the first of ``keys`` the command line changed, else the first the config
    has, else ``fallback``."""
    mp = int(layout.get("tp", 1)) * int(layout.get("pp", 1)) * int(layout.get("cp", 1))
    if world <= 0 or world % mp == 0:
        return
    changed = [key for key in v.result.overridden if key in keys]
    named = (changed or [key for key in keys if key in v.flat] or [fallback])[0]
    raise RlsimError(f"the training world of {world} GPUs is not divisible by tp x pp x cp = {layout.get('tp', 1)} x "
                     f"{layout.get('pp', 1)} x {layout.get('cp', 1)} = {mp}: {backend} refuses it at start-up",
                     source=v.result.source, field=named,
                     fix=f"change {named} (or the cluster size) so that tp x pp x cp divides {world}")


# Megatron-Core refuses the allgather (and alltoall_seq) token dispatcher beside variable_seq_lengths=True
# (megatron-core 0.10.0, 0.11.0 and 0.13.0 transformer/transformer_config.py __post_init__: "Token dispatcher
# type: allgather does not support variable sequence length, please use alltoall dispatcher instead"; 0.8.0
# has no such check), which verl, SkyRL and AReaL set for their packed, variable-length micro-batches.
DISPATCHER_VARIABLE_LENGTH_CHECK = "megatron-core 0.10.0 - 0.13.0 transformer/transformer_config.py"
DISPATCHER_FIELD = "workload.train_params.comm.moe_token_dispatcher"


# Megatron-Core pairs DeepEP with the flex dispatcher both ways (megatron-core 0.13.0 transformer_config.py
# __post_init__: "DeepEP backend is only supported with flex token dispatcher."; moe/token_dispatcher.py
# MoEFlexTokenDispatcher: assert config.moe_enable_deepep, "DeepEP is not enabled. Please set
# --moe-enable-deepep to use DeepEP backend.").
DEEPEP_CHECK = "megatron-core 0.13.0 transformer_config.py / moe/token_dispatcher.py MoEFlexTokenDispatcher"


def check_deepep_pair(v: Values, key: str, deepep_key: str) -> None:
    """Megatron-Core's pairing of moe_enable_deepep (``deepep_key``, default false) with the flex
    dispatcher (``key``): either without the other refused at the key that breaks it (DEEPEP_CHECK)."""
    src = v.result.source
    value = v(key) if v.given(key) else None
    deepep = v.flag(deepep_key) if v.given(deepep_key) else False
    if value == "flex" and not deepep:
        raise RlsimError(f"the flex token dispatcher without {deepep_key}: Megatron-Core asserts it at start-up "
                         f"({DEEPEP_CHECK}: 'DeepEP is not enabled')", source=src, field=deepep_key,
                         fix=f"pass {deepep_key}=true (or {key}=alltoall)")
    if deepep and value != "flex":
        raise RlsimError(f"{deepep_key}=true beside the {value or 'default (alltoall)'} token dispatcher: "
                         f"Megatron-Core refuses it at start-up ({DEEPEP_CHECK}: 'DeepEP backend is only supported "
                         "with flex token dispatcher')", source=src, field=deepep_key,
                         fix=f"pass {key}=flex, or {deepep_key}=false")


def megatron_token_dispatcher(v: Values, key: str, w: dict[str, Any], decided: dict[str, tuple[Status, str]], *,
                              variable_seq_lengths: str | None, deepep_key: str | None = None) -> None:
    """A framework's Megatron-Core moe_token_dispatcher_type (``key``) onto workload.train_params.comm.
    moe_token_dispatcher (alltoall, allgather or flex), after w's model and train_layout are mapped; left
    out, the stack's (alltoall, each framework's default). ``variable_seq_lengths``: where the framework sets
    Megatron's variable_seq_lengths=True (its file), beside which Megatron-Core refuses allgather
    (DISPATCHER_VARIABLE_LENGTH_CHECK): refused here too. ``deepep_key``: the framework's
    moe_enable_deepep, which flex needs and which needs flex (check_deepep_pair); a framework without one
    (None) has flex refused. Without a routed token leaving its rank (a dense model, or neither ep nor
    expert TP above 1) it is listed ignored, as every dispatcher moves nothing there. Megatron-Core's
    other dispatchers are refused (params.UNMODELLED_DISPATCHERS)."""
    from ..params import UNMODELLED_DISPATCHERS
    src = v.result.source
    value = v(key) if v.given(key) else None
    if deepep_key is not None:
        check_deepep_pair(v, key, deepep_key)
    if value is None:
        return
    if value in UNMODELLED_DISPATCHERS:
        raise RlsimError(f"Megatron-Core's {value!r} token dispatcher is not one rlsim prices "
                         f"({UNMODELLED_DISPATCHERS[value]})", source=src, field=key,
                         fix=f"pass {key}=alltoall (or allgather where the framework allows it)")
    if value not in ("alltoall", "allgather", "flex"):
        raise RlsimError(f"unknown Megatron-Core token dispatcher {value!r}", source=src, field=key,
                         fix=f"pass {key}=alltoall, {key}=allgather or {key}=flex")
    if value == "flex" and deepep_key is None:
        raise RlsimError("the flex (DeepEP) token dispatcher is read from verl's and NeMo RL's configs, where "
                         "their moe_enable_deepep is mapped beside it; this framework's is not", source=src,
                         field=key, fix=f"pass {key}=alltoall, or --set {DISPATCHER_FIELD}=flex on the scenario")
    if value == "allgather" and variable_seq_lengths:
        raise RlsimError(f"the allgather token dispatcher beside Megatron's variable_seq_lengths=True, which "
                         f"{variable_seq_lengths} sets: Megatron-Core refuses the pair at start-up "
                         f"({DISPATCHER_VARIABLE_LENGTH_CHECK}: 'please use alltoall dispatcher instead')",
                         source=src, field=key, fix=f"pass {key}=alltoall")
    layout = w.get("train_layout")
    planned = not isinstance(layout, Mapping)   # "auto": the planner may split the experts
    ep = 1 if planned else layout.get("ep", 1)
    expert_tp = 1 if planned else layout.get("tp", 1) if layout.get("etp") is None else layout["etp"]
    if not has_experts(w.get("model"), ep) or not (planned or ep > 1 or expert_tp > 1):
        decided[key] = ("ignored", "no routed token leaves its rank (a dense model, or ep and expert TP 1): "
                                   "every dispatcher moves nothing")
        if deepep_key is not None and v.given(deepep_key):
            decided[deepep_key] = ("ignored", f"read with {key}, which moves nothing here")
        return
    merge_train_params(w, {"comm": {"moe_token_dispatcher": value}})
