"""`rlsim presets`: list the built-in topology, model and workload presets."""
from __future__ import annotations

import argparse
from typing import Any

HELP = "list built-in presets (topologies, models, workloads, training stacks, rollout engines)"
EXAMPLES = """examples:
  rlsim presets
  rlsim presets --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .common import add_common

    add_common(parser, overrides=False)


def _topologies() -> list[dict[str, Any]]:
    from ..presets import preset_dir, preset_names, read_yaml

    out = []
    for name in preset_names("topologies"):
        data = read_yaml(preset_dir("topologies") / f"{name}.yaml")
        params = {k: data[k] for k in ("nodes", "supernodes", "racks", "domains") if k in data}
        for gname, group in (data.get("groups") or {}).items():
            for k in ("nodes", "supernodes", "racks", "domains"):
                if isinstance(group, dict) and k in group:
                    params[f"groups.{gname}.{k}"] = group[k]
        out.append({"name": name, "description": str(data.get("description", "")), "parameters": params})
    return out


def _models() -> list[str]:
    try:  # the llm layer may not be built yet
        from ..llm.architecture import model_names
    except ImportError:
        return []
    return list(model_names())


def _workloads() -> list[str]:
    from ..presets import preset_names

    try:
        return list(preset_names("workloads"))
    except (ImportError, OSError, ValueError):
        return []


def _framework_configs() -> list[str]:
    """The example framework configs (workloads/frameworks/, for --from-verl / --from-nemo-rl / --from-areal / --from-trl /
    --from-openrlhf / --from-skyrl): not workloads."""
    from ..presets import preset_dir

    try:
        folder = preset_dir("workloads") / "frameworks"
        return [str(p) for p in sorted([*folder.glob("*.yaml"), *folder.glob("*.sh")])]
    except (OSError, ValueError):
        return []


def _stacks() -> dict[str, dict[str, str]]:
    """The named training stacks and rollout engines (workload.train_software / workload.engine) with
    their sources."""
    from ..engine_software import ENGINE_SOFTWARE
    from ..params import TRAIN_SOFTWARE

    return {"train_software": {name: stack.source for name, stack in TRAIN_SOFTWARE.items()},
            "engines": {name: engine.source for name, engine in ENGINE_SOFTWARE.items()}}


def collect() -> dict[str, Any]:
    return {"topologies": _topologies(), "models": _models(), "workloads": _workloads(),
            "framework_configs": _framework_configs(), **_stacks()}


def run(args: argparse.Namespace) -> int:
    from .common import print_json

    doc = collect()
    if args.json:
        print_json(doc)
        return 0
    print("topologies (set parameters with --set topology.KEY=VALUE):")
    for t in doc["topologies"]:
        params = ", ".join(f"{k}={v}" for k, v in t["parameters"].items())
        print(f"  {t['name']:<18} [{params}]  {t['description']}")
    print("models:")
    print("  " + (", ".join(doc["models"]) or "(none yet)"))
    print("workloads:")
    print("  " + (", ".join(doc["workloads"]) or "(none yet)"))
    print("framework configs (examples for rlsim run --from-verl / --from-nemo-rl / --from-areal / --from-openrlhf / "
          "--from-trl / --from-skyrl):")
    for path in doc["framework_configs"]:
        print(f"  {path}")
    for key, title in (("train_software", "training stacks (--set workload.train_software=NAME)"),
                       ("engines", "rollout engines (--set workload.engine=NAME)")):
        print(f"{title}:")
        for name, source in doc[key].items():
            print(f"  {name:<22} {source}")
    return 0
